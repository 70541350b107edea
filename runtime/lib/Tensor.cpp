#include "gpipe/runtime/Tensor.h"

#include <cstring>

namespace gpipe::runtime {

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string HostTensor::describe() const {
  std::string s = std::string(dtypeName(dtype)) + "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

HostTensor moveAxisToFront(const HostTensor &t, int64_t axis) {
  if (axis == 0)
    return t;
  // [outer, n, inner] -> [n, outer, inner], inner as contiguous bytes.
  int64_t outer = 1, n = t.shape[axis];
  size_t inner = dtypeSize(t.dtype);
  for (int64_t i = 0; i < axis; ++i)
    outer *= t.shape[i];
  for (size_t i = axis + 1; i < t.shape.size(); ++i)
    inner *= static_cast<size_t>(t.shape[i]);
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.shape.erase(out.shape.begin() + axis);
  out.shape.insert(out.shape.begin(), n);
  out.data.resize(t.data.size());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(out.data.data() + (s * outer + o) * inner,
                  t.data.data() + (o * n + s) * inner, inner);
  return out;
}

} // namespace gpipe::runtime
