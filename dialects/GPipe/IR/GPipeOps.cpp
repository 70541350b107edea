//===- GPipeOps.cpp - Verifiers of gpipe ops ------------------------------===//
#include "GPipe/IR/GPipeOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace gpipe;

LogicalResult ParameterOp::verify() {
  auto type = llvm::dyn_cast<RankedTensorType>(getValue().getType());
  if (!type || !type.hasStaticShape())
    return emitOpError("value must be a statically shaped tensor, got ")
           << getValue().getType();
  if (int(getTrainable()) + int(getOptimizerState()) + int(getConstant()) > 1)
    return emitOpError("is at most one of trainable, optimizer_state and "
                       "constant");
  return success();
}

LogicalResult
GetParameterOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param =
      symbolTable.lookupNearestSymbolFrom<ParameterOp>(*this, getNameAttr());
  if (!param)
    return emitOpError("'") << getName() << "' does not name a gpipe.parameter";
  if (param.getType() != getType())
    return emitOpError("result type ")
           << getType() << " differs from parameter '" << getName()
           << "' of type " << param.getType();
  return success();
}

LogicalResult
AssignParameterOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param =
      symbolTable.lookupNearestSymbolFrom<ParameterOp>(*this, getNameAttr());
  if (!param)
    return emitOpError("'") << getName() << "' does not name a gpipe.parameter";
  if (param.getType() != getValue().getType())
    return emitOpError("value type ")
           << getValue().getType() << " differs from parameter '" << getName()
           << "' of type " << param.getType();
  return success();
}

LogicalResult StageOp::verify() {
  if (static_cast<int64_t>(getIndex()) < 0)
    return emitOpError("index must be non-negative, got ")
           << static_cast<int64_t>(getIndex());
  if (getDevice().empty())
    return emitOpError("device must not be empty");
  Block &body = getBody().front();
  if (body.getArgumentTypes() != getInputs().getTypes())
    return emitOpError("block argument types must match the input types");
  auto yield = llvm::dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with gpipe.yield");
  if (yield.getValues().getTypes() != getOutputs().getTypes())
    return emitOpError("yielded types must match the result types");
  return success();
}

#define GET_OP_CLASSES
#include "GPipe/IR/GPipeOps.cpp.inc"

LogicalResult
ParallelForOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // A func.func before the lowering to LLVM, an llvm.func after it.
  auto callee = symbolTable.lookupNearestSymbolFrom<FunctionOpInterface>(
      *this, getCalleeAttr());
  if (!callee)
    return emitOpError("'") << getCallee() << "' does not name a function";
  if (callee.getNumArguments() != 4 || callee.getNumResults() != 0)
    return emitOpError("'")
           << getCallee()
           << "' must take (arena, params, begin, end) and return nothing";
  return success();
}
