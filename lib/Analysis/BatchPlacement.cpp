//===- BatchPlacement.cpp - Where the batch sits in each value ------------===//
//
// A forward walk over the nn ops of a function in program order. The rules
// assume, as batching inference does, that the model treats samples
// independently: an op that keeps a batched operand's dimension (aligned
// from the right, NumPy style) keeps the batch there. Ops that move or
// fold dimensions have their own rules: reshape (the batch keeps its
// element stride), transpose, gather, reductions and broadcasts. Any
// disagreement between operands, or a dimension whose size changes, loses
// the batch (nullopt), and the runtime then refuses to split that output.
//
//===----------------------------------------------------------------------===//
#include "Analysis/BatchPlacement.h"

#include "NN/IR/NNOps.h"

#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace gpipe {
namespace {

using Placement = std::optional<BatchPlacement>;

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Where the batch of operand `operand` (placed at `p`) is in `result`.
Placement transfer(Operation *op, OpOperand &operand, BatchPlacement p,
                   Value result, int64_t batch) {
  ArrayRef<int64_t> in = shapeOf(operand.get()), out = shapeOf(result);
  if (auto reshape = dyn_cast<nn::ReshapeOp>(op))
    return reshapedBatchPlacement(in, p, out, batch);
  if (auto transpose = dyn_cast<nn::TransposeOp>(op)) {
    for (auto [j, from] : llvm::enumerate(transpose.getPerm()))
      if (from == p.axis)
        return BatchPlacement{int64_t(j), p.inner};
    return std::nullopt;
  }
  if (auto gather = dyn_cast<nn::GatherOp>(op)) {
    int64_t axis = gather.getAxis();
    if (axis < 0)
      axis += int64_t(shapeOf(gather.getData()).size());
    if (operand.getOperandNumber() == 1) // the indices' dims, at `axis`
      return BatchPlacement{axis + p.axis, p.inner};
    if (p.axis == axis)
      return std::nullopt; // the batch is what is indexed
    int64_t shift = int64_t(shapeOf(gather.getIndices()).size()) - 1;
    return BatchPlacement{p.axis < axis ? p.axis : p.axis + shift, p.inner};
  }
  auto reduction = [&](ArrayRef<int64_t> axes, bool keepdims) -> Placement {
    if (llvm::is_contained(axes, p.axis))
      return std::nullopt; // summed over the samples
    if (keepdims)
      return p;
    int64_t before =
        llvm::count_if(axes, [&](int64_t a) { return a < p.axis; });
    return BatchPlacement{p.axis - before, p.inner};
  };
  if (auto r = dyn_cast<nn::ReduceSumOp>(op))
    return reduction(r.getAxes(), r.getKeepdims());
  if (auto r = dyn_cast<nn::ReduceMeanOp>(op))
    return reduction(r.getAxes(), r.getKeepdims());
  if (isa<nn::SoftmaxCrossEntropyOp>(op))
    return std::nullopt;
  // Any other op: the same dimension, aligned from the right, of the same
  // size (element-wise ops and their broadcasts, matmul's batch and row
  // dimensions, convolution and pooling, normalizations, concat or slice
  // along other axes).
  int64_t axis = p.axis + int64_t(out.size()) - int64_t(in.size());
  if (axis < 0 || out[axis] != in[p.axis])
    return std::nullopt;
  return BatchPlacement{axis, p.inner};
}

} // namespace

std::optional<BatchPlacement> reshapedBatchPlacement(ArrayRef<int64_t> in,
                                                     BatchPlacement p,
                                                     ArrayRef<int64_t> out,
                                                     int64_t batch) {
  int64_t stride = p.inner * product(in.drop_front(p.axis + 1));
  if (stride <= 0 || batch <= 0)
    return std::nullopt; // zero-sized
  int64_t suffix = 1;    // the elements of out's dimensions after j
  for (int64_t j = int64_t(out.size()) - 1; j >= 0 && suffix != 0; --j) {
    if (stride % suffix == 0 && (suffix * out[j]) % (stride * batch) == 0)
      return BatchPlacement{j, stride / suffix};
    suffix *= out[j];
  }
  return std::nullopt;
}

SmallVector<int64_t> batchToAxisPermutation(int64_t rank, int64_t axis) {
  SmallVector<int64_t> perm;
  for (int64_t j = 0; j < rank; ++j)
    perm.push_back(j < axis ? j + 1 : j == axis ? 0 : j);
  return perm;
}

SmallVector<std::optional<BatchPlacement>>
resultBatchPlacements(func::FuncOp forward, int64_t batch) {
  llvm::DenseMap<Value, BatchPlacement> placed;
  for (BlockArgument arg : forward.getArguments()) {
    ArrayRef<int64_t> shape = shapeOf(arg);
    if (!shape.empty() && shape.front() == batch)
      placed[arg] = BatchPlacement{0, 1};
  }
  Block &body = forward.getBody().front();
  for (Operation &op : body.without_terminator()) {
    for (Value result : op.getResults()) {
      if (!isa<RankedTensorType>(result.getType()))
        continue;
      Placement found;
      bool conflict = false, any = false;
      for (OpOperand &operand : op.getOpOperands()) {
        auto it = placed.find(operand.get());
        if (it == placed.end())
          continue;
        any = true;
        Placement p = transfer(&op, operand, it->second, result, batch);
        if (!p || (found && !(*found == *p)))
          conflict = true;
        found = p;
      }
      if (any && !conflict && found)
        placed[result] = *found;
    }
  }
  SmallVector<std::optional<BatchPlacement>> results;
  for (Value v : body.getTerminator()->getOperands()) {
    auto it = placed.find(v);
    results.push_back(it == placed.end() ? Placement() : it->second);
  }
  return results;
}

} // namespace gpipe
