//===- StashPrecision.cpp - What the stash may keep in bfloat16 -----------===//
#include "Transforms/StashPrecision.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace gpipe {

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

bool receivedInBf16(func::FuncOp f, unsigned index) {
  // The forward multiplies it, or returns it to be kept for the backward
  // (a stash output): the backward phases' reads are checked below.
  auto returned = [](Operation *op) { return !isa<func::ReturnOp>(op); };
  BlockArgument arg = f.getArgument(index);
  if (argRole(f, index) != Role::Activation ||
      !onlyMultipliedInBf16(arg, returned))
    return false;
  SmallVector<StringRef> names{nameOf(f.getArgAttrDict(index))};
  for (OpOperand &use : arg.getUses()) {
    if (!isa<func::ReturnOp>(use.getOwner()))
      continue;
    unsigned result = use.getOperandNumber();
    if (resultRole(f, result) != Role::Stash)
      return false; // sent on, or a model output: float32
    names.push_back(nameOf(f.getResultAttrDict(result)));
  }
  auto module = f->getParentOfType<ModuleOp>();
  if (!module)
    return true;
  for (StringRef phase : {"backward", "backward_input", "backward_weight"}) {
    auto backward = module.lookupSymbol<func::FuncOp>(phase);
    if (!backward)
      continue;
    for (unsigned j = 0; j < backward.getNumArguments(); ++j)
      if (llvm::is_contained(names, nameOf(backward.getArgAttrDict(j))) &&
          !onlyMultipliedInBf16(backward.getArgument(j)))
        return false;
  }
  return true;
}

} // namespace gpipe
