//===- ProductPrecision.cpp - Values only multiplied in bfloat16 ----------===//
#include "Analysis/ProductPrecision.h"

#include "NN/IR/NNOps.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace gpipe {

namespace {

/// Whether `use` rounds its value to bfloat16 before multiplying it.
bool roundsToBf16(OpOperand &use) {
  Operation *op = use.getOwner();
  auto product = dyn_cast<nn::ComputeTypeOpInterface>(op);
  if (!product || product.getComputeType() != "bf16")
    return false;
  // A gemm's c is added in float32; every operand of a matmul multiplies.
  if (isa<nn::GemmOp>(op))
    return use.getOperandNumber() < 2;
  return isa<nn::MatMulOp>(op);
}

bool onlyRounded(Value v, function_ref<bool(Operation *)> counts) {
  for (OpOperand &use : v.getUses()) {
    Operation *op = use.getOwner();
    if (counts && !counts(op))
      continue;
    if (isa<nn::ReshapeOp, nn::TransposeOp>(op)) {
      if (!onlyRounded(op->getResult(0), nullptr))
        return false;
      continue;
    }
    if (!roundsToBf16(use))
      return false;
  }
  return true;
}

} // namespace

bool onlyMultipliedInBf16(Value v, function_ref<bool(Operation *)> counts) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.getElementType().isF32())
    return false;
  return onlyRounded(v, counts);
}

} // namespace gpipe
