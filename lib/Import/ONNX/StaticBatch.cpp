//===- StaticBatch.cpp - Inputs that still carry the exported batch -------===//
//
// A model exported with a static batch B and compiled for batch b: values
// computed from the graph input carry b, but a constant the exporter
// materialized at B (PyTorch's `zeros_like` of an attention mask) or a
// broadcast to a constant shape holding B (`class_token.expand(B, -1, -1)`)
// still carries B. Before a broadcasting op or a Concat, such an input is
// given the compiled batch when that is exact: the constant holds the same
// values for every sample of the exported batch, or the broadcast repeats
// one row along that dimension.
//
//===----------------------------------------------------------------------===//
#include "GraphImporter.h"

#include "NN/IR/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// A dimension that carries the batch in one of the op's inputs: its
/// size at the exported batch and now, and the elements of the dimension
/// inside the batch index; `dim` counts from the last dimension.
struct BatchDim {
  int64_t fromEnd, then, now, inner;
};

/// `c` with dimension `axis` (of size outer * batchThen * inner) rebuilt
/// for `batchNow` samples from its first sample, or nullopt when the
/// samples differ.
std::optional<ConstTensor> rebatchConstant(const ConstTensor &c, int64_t axis,
                                           int64_t batchThen, int64_t batchNow,
                                           int64_t inner) {
  int64_t pre = 1, post = 1, size = c.shape[axis];
  for (int64_t i = 0; i < axis; ++i)
    pre *= c.shape[i];
  for (size_t i = axis + 1; i < c.shape.size(); ++i)
    post *= c.shape[i];
  int64_t outer = size / (batchThen * inner);
  auto same = [&](int64_t a, int64_t b) {
    return c.isFloat() ? c.floats[a] == c.floats[b] : c.ints[a] == c.ints[b];
  };
  auto at = [&](int64_t p, int64_t o, int64_t s, int64_t in, int64_t q) {
    return ((p * size + (o * batchThen + s) * inner + in) * post) + q;
  };
  for (int64_t p = 0; p < pre; ++p)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t s = 1; s < batchThen; ++s)
        for (int64_t in = 0; in < inner; ++in)
          for (int64_t q = 0; q < post; ++q)
            if (!same(at(p, o, s, in, q), at(p, o, 0, in, q)))
              return std::nullopt;
  ConstTensor out;
  out.dtype = c.dtype;
  out.shape = c.shape;
  out.shape[axis] = outer * batchNow * inner;
  for (int64_t p = 0; p < pre; ++p)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t s = 0; s < batchNow; ++s)
        for (int64_t in = 0; in < inner; ++in)
          for (int64_t q = 0; q < post; ++q) {
            int64_t from = at(p, o, 0, in, q);
            if (c.isFloat())
              out.floats.push_back(c.floats[from]);
            else
              out.ints.push_back(c.ints[from]);
          }
  return out;
}

} // namespace

LogicalResult GraphImporter::rebatchConstantInput(size_t i, int64_t axis,
                                                  int64_t inner) {
  Entry &entry = values.find(inputName(i))->second;
  std::optional<ConstTensor> rebatched;
  if (entry.constant && !entry.initializer)
    rebatched = rebatchConstant(*entry.constant, axis, exportBatch,
                                compiledBatch, inner);
  if (!rebatched) {
    error() << "input '" << inputName(i)
            << "' is a constant that holds different values for the "
            << exportBatch << " samples the model was exported with, "
            << "so it cannot be given batch " << compiledBatch
            << ": export with the batch dynamic (torch.onnx.export(..., "
               "dynamic_axes={'input': {0: 'batch'}, ...}))";
    nodeFailed = true;
    return failure();
  }
  entry.constant = std::move(*rebatched);
  entry.value = Value();
  setBatchInner(inputName(i), inner);
  return success();
}

LogicalResult GraphImporter::rebatchInputs(std::optional<int64_t> concatAxis) {
  if (exportBatch <= 0 || compiledBatch <= 0)
    return success();
  size_t n = numInputs();
  // Where the inputs computed from the graph input carry the batch.
  SmallVector<BatchDim> dims;
  for (size_t i = 0; i < n; ++i) {
    if (!hasInput(i))
      continue;
    const SmallVector<int64_t> *then = exportShape(inputName(i));
    auto type = inputType(i);
    if (!then || ::mlir::failed(type) ||
        then->size() != static_cast<size_t>(type->getRank()))
      continue;
    int64_t rank = type->getRank();
    for (int64_t d = 0; d < rank; ++d) {
      int64_t was = (*then)[d], now = type->getDimSize(d);
      if (was == now || was % exportBatch != 0 ||
          was / exportBatch * compiledBatch != now)
        continue;
      BatchDim dim{rank - d, was, now,
                   batchInner(inputName(i)).value_or(was / exportBatch)};
      if (llvm::none_of(dims, [&](const BatchDim &o) {
            return o.fromEnd == dim.fromEnd;
          }))
        dims.push_back(dim);
    }
  }
  for (const BatchDim &dim : dims) {
    for (size_t j = 0; j < n; ++j) {
      if (!hasInput(j))
        continue;
      auto type = inputType(j);
      if (::mlir::failed(type))
        return failure();
      int64_t rank = type->getRank(), d = rank - dim.fromEnd;
      if (d < 0 || type->getDimSize(d) != dim.then ||
          (concatAxis && d == *concatAxis))
        continue;
      Entry &entry = values.find(inputName(j))->second;
      if (entry.constant && !entry.initializer) {
        if (::mlir::failed(rebatchConstantInput(j, d, dim.inner)))
          return failure();
        continue;
      }
      auto broadcast =
          entry.value ? entry.value.getDefiningOp<nn::BroadcastOp>() : nullptr;
      if (!broadcast)
        continue;
      auto source = cast<RankedTensorType>(broadcast.getInput().getType());
      int64_t s = source.getRank() - dim.fromEnd;
      if (s >= 0 && source.getDimSize(s) != 1)
        continue;
      SmallVector<int64_t> shape(broadcast.getShape());
      shape[d] = dim.now;
      auto result = createValue<nn::BroadcastOp>(
          {broadcast.getInput()},
          {named("shape", builder.getDenseI64ArrayAttr(shape))});
      if (::mlir::failed(result))
        return failure();
      entry.value = *result;
      setBatchInner(inputName(j), dim.inner);
    }
  }
  return success();
}
