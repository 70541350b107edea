//===- StashPrecision.cpp - What the stash may keep in bfloat16 -----------===//
#include "Transforms/StashPrecision.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/BuiltinOps.h"

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

bool keptInBf16(func::FuncOp f, unsigned index) {
  Role role = argRole(f, index);
  if ((role != Role::Stash && role != Role::Activation) ||
      !onlyMultipliedInBf16(f.getArgument(index)))
    return false;
  // A split backward's weight part reads the input part's stash again: it
  // must only multiply the value in bfloat16 too.
  if (f.getSymName() != "backward_input")
    return true;
  auto module = f->getParentOfType<ModuleOp>();
  auto weight =
      module ? module.lookupSymbol<func::FuncOp>("backward_weight") : nullptr;
  if (!weight)
    return true;
  StringRef name = nameOf(f.getArgAttrDict(index));
  for (unsigned j = 0; j < weight.getNumArguments(); ++j)
    if (nameOf(weight.getArgAttrDict(j)) == name)
      return onlyMultipliedInBf16(weight.getArgument(j));
  return true;
}

} // namespace gpipe
