//===- ConstFolding.cpp - Evaluating ops on ConstTensors ------------------===//
#include "ConstFolding.h"

#include "mlir/Dialect/Traits.h"

using namespace gpipe::onnx_import;

namespace {
std::vector<int64_t> stridesOf(llvm::ArrayRef<int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Index into a tensor of `shape` broadcast to `outShape` for the output
/// element at multi-index `idx`.
int64_t broadcastIndex(llvm::ArrayRef<int64_t> shape,
                       llvm::ArrayRef<int64_t> outShape,
                       llvm::ArrayRef<int64_t> idx) {
  std::vector<int64_t> strides = stridesOf(shape);
  size_t offset = outShape.size() - shape.size();
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1)
      flat += idx[i + offset] * strides[i];
  return flat;
}

std::vector<int64_t> unflatten(int64_t flat, llvm::ArrayRef<int64_t> shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return idx;
}

/// Copies element `from` of `src` to element `to` of `dst` (same dtype).
void copyElement(const ConstTensor &src, int64_t from, ConstTensor &dst,
                 int64_t to) {
  if (src.isFloat())
    dst.floats[to] = src.floats[from];
  else
    dst.ints[to] = src.ints[from];
}

ConstTensor emptyLike(const ConstTensor &src, llvm::ArrayRef<int64_t> shape);

/// A tensor of `shape` whose element at multi-index idx is `data`'s
/// element source(idx) (a flat index): slices, transposes, broadcasts.
ConstTensor
copyFrom(const ConstTensor &data, llvm::ArrayRef<int64_t> shape,
         llvm::function_ref<int64_t(llvm::ArrayRef<int64_t>)> source) {
  ConstTensor out = emptyLike(data, shape);
  for (int64_t i = 0, n = out.numElements(); i < n; ++i)
    copyElement(data, source(unflatten(i, shape)), out, i);
  return out;
}

ConstTensor emptyLike(const ConstTensor &src, llvm::ArrayRef<int64_t> shape) {
  ConstTensor out;
  out.dtype = src.dtype;
  out.shape.assign(shape.begin(), shape.end());
  if (out.isFloat())
    out.floats.resize(out.numElements());
  else
    out.ints.resize(out.numElements());
  return out;
}
} // namespace

std::optional<ConstTensor> gpipe::onnx_import::foldBroadcast(
    llvm::ArrayRef<const ConstTensor *> inputs, DType dtype,
    llvm::function_ref<void(llvm::ArrayRef<int64_t>, ConstTensor &, int64_t)>
        fn) {
  llvm::SmallVector<int64_t> shape;
  for (const ConstTensor *t : inputs) {
    llvm::SmallVector<int64_t> joined;
    if (!mlir::OpTrait::util::getBroadcastedShape(shape, t->shape, joined))
      return std::nullopt;
    shape = std::move(joined);
  }
  ConstTensor out;
  out.dtype = dtype;
  out.shape = shape;
  if (out.isFloat())
    out.floats.resize(out.numElements());
  else
    out.ints.resize(out.numElements());
  llvm::SmallVector<int64_t> at(inputs.size());
  for (int64_t i = 0, e = out.numElements(); i < e; ++i) {
    std::vector<int64_t> idx = unflatten(i, shape);
    for (size_t k = 0; k < inputs.size(); ++k)
      at[k] = broadcastIndex(inputs[k]->shape, shape, idx);
    fn(at, out, i);
  }
  return out;
}

std::optional<ConstTensor> gpipe::onnx_import::foldBinary(
    const ConstTensor &a, const ConstTensor &b,
    const std::function<int64_t(int64_t, int64_t)> &intFn,
    const std::function<double(double, double)> &floatFn) {
  if (a.dtype != b.dtype)
    return std::nullopt;
  std::optional<ConstTensor> out = foldBroadcast(
      {&a, &b}, a.dtype,
      [&](llvm::ArrayRef<int64_t> at, ConstTensor &out, int64_t i) {
        if (out.isFloat())
          out.floats[i] = floatFn(a.floats[at[0]], b.floats[at[1]]);
        else
          out.ints[i] = intFn(a.ints[at[0]], b.ints[at[1]]);
      });
  if (!out)
    return std::nullopt;
  return out->castTo(out->dtype); // wrap to the dtype's range
}

ConstTensor gpipe::onnx_import::foldGather(const ConstTensor &data,
                                           const std::vector<int64_t> &indices,
                                           llvm::ArrayRef<int64_t> indicesShape,
                                           int64_t axis) {
  llvm::SmallVector<int64_t> shape(data.shape.begin(),
                                   data.shape.begin() + axis);
  shape.append(indicesShape.begin(), indicesShape.end());
  shape.append(data.shape.begin() + axis + 1, data.shape.end());
  ConstTensor out = emptyLike(data, shape);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= data.shape[i];
  for (size_t i = axis + 1; i < data.shape.size(); ++i)
    inner *= data.shape[i];
  int64_t n = indices.size(), dim = data.shape[axis], to = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < inner; ++i)
        copyElement(data, (o * dim + indices[k]) * inner + i, out, to++);
  return out;
}

ConstTensor
gpipe::onnx_import::foldConcat(llvm::ArrayRef<const ConstTensor *> inputs,
                               int64_t axis) {
  llvm::SmallVector<int64_t> shape = inputs.front()->shape;
  shape[axis] = 0;
  for (const ConstTensor *t : inputs)
    shape[axis] += t->shape[axis];
  ConstTensor out = emptyLike(*inputs.front(), shape);
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  int64_t to = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *t : inputs) {
      int64_t chunk = outer ? t->numElements() / outer : 0;
      for (int64_t i = 0; i < chunk; ++i)
        copyElement(*t, o * chunk + i, out, to++);
    }
  return out;
}

ConstTensor gpipe::onnx_import::foldSlice(const ConstTensor &data,
                                          llvm::ArrayRef<int64_t> starts,
                                          llvm::ArrayRef<int64_t> steps,
                                          llvm::ArrayRef<int64_t> outShape) {
  std::vector<int64_t> strides = stridesOf(data.shape);
  return copyFrom(data, outShape, [&](llvm::ArrayRef<int64_t> idx) {
    int64_t from = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      from += (starts[d] + idx[d] * steps[d]) * strides[d];
    return from;
  });
}

ConstTensor gpipe::onnx_import::foldTranspose(const ConstTensor &data,
                                              llvm::ArrayRef<int64_t> perm) {
  llvm::SmallVector<int64_t> outShape;
  for (int64_t p : perm)
    outShape.push_back(data.shape[p]);
  std::vector<int64_t> inStrides = stridesOf(data.shape);
  return copyFrom(data, outShape, [&](llvm::ArrayRef<int64_t> idx) {
    int64_t from = 0;
    for (size_t a = 0; a < perm.size(); ++a)
      from += idx[a] * inStrides[perm[a]];
    return from;
  });
}

ConstTensor gpipe::onnx_import::foldExpand(const ConstTensor &data,
                                           llvm::ArrayRef<int64_t> shape) {
  return copyFrom(data, shape, [&](llvm::ArrayRef<int64_t> idx) {
    return broadcastIndex(data.shape, shape, idx);
  });
}
