#include "OneDnn.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace gpipe::runtime::cpu {

namespace {
dims rowMajorStrides(const dims &shape) {
  dims strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  return strides;
}
} // namespace

memory::desc plainDesc(const dims &shape) {
  return memory::desc(shape, memory::data_type::f32, rowMajorStrides(shape));
}

memory bindSlot(const KernelSpec &spec, const TensorSlot &slot,
                const KernelMemory &mem, OneDnn &dnn, const dims &shape) {
  if (slot.dtype != DType::F32)
    spec.fail("element type " + std::string(dtypeName(slot.dtype)) +
              " (only float32 kernels are implemented)");
  dims d = shape.empty() ? dims(slot.shape) : shape;
  return memory(plainDesc(d), dnn.engine, mem.address(slot));
}

memory::desc anyLayout(const memory &m) {
  return memory::desc(m.get_desc().dims(), memory::data_type::f32,
                      memory::format_tag::any);
}

memory zeroShift(const memory::desc &desc, OneDnn &dnn) {
  memory shift(desc, dnn.engine);
  std::memset(shift.get_data_handle(), 0, desc.get_size());
  return shift;
}

dims padLeft(const std::vector<int64_t> &shape, size_t rank) {
  dims d(rank - shape.size(), 1);
  d.insert(d.end(), shape.begin(), shape.end());
  return d;
}

void needEntries(const KernelSpec &spec, const std::string &key, size_t size) {
  if (spec.ints(key).size() != size)
    spec.fail("attribute '" + key + "' must have " + std::to_string(size) +
              " entries");
}

Window2d window2d(const KernelSpec &spec) {
  std::vector<int64_t> s = spec.ints("strides"), p = spec.ints("pads"),
                       d = spec.ints("dilations");
  return {s[0], s[1], p[0], p[1], d[0], d[1]};
}

void PrimitiveKernel::run() {
  primitive.execute(dnn.stream, args);
  dnn.stream.wait();
  if (epilogue)
    epilogue();
}

void ReorderedKernel::bind(int arg, const memory &plain,
                           const memory::desc &chosen, bool output,
                           bool constant, const uint64_t *version) {
  if (plain.get_desc() == chosen) {
    args[arg] = plain;
    return;
  }
  memory inner(chosen, dnn.engine);
  args[arg] = inner;
  if (output)
    after.push_back({inner, plain});
  else if (constant)
    once.push_back({plain, inner});
  else if (version)
    versioned.push_back({plain, inner, version});
  else
    before.push_back({plain, inner});
}

void ReorderedKernel::run() {
  for (auto &[from, to] : once)
    dnnl::reorder(from, to).execute(dnn.stream, from, to);
  once.clear();
  for (auto &[from, to] : before)
    dnnl::reorder(from, to).execute(dnn.stream, from, to);
  for (Versioned &v : versioned)
    if (!v.valid || v.converted != *v.version) {
      dnnl::reorder(v.from, v.to).execute(dnn.stream, v.from, v.to);
      v.converted = *v.version;
      v.valid = true;
    }
  primitive.execute(dnn.stream, args);
  for (auto &[from, to] : after)
    dnnl::reorder(from, to).execute(dnn.stream, from, to);
  dnn.stream.wait();
}

void sgemm(const char *kind, char ta, char tb, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
           float *c, int64_t ldc) {
  dnnl_status_t status =
      dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw std::runtime_error(std::string(kind) +
                             ": oneDNN's sgemm failed (status " +
                             std::to_string(static_cast<int>(status)) + ")");
}

} // namespace gpipe::runtime::cpu
