//===- NNOps.h - Ops of the nn dialect --------------------------*- C++ -*-===//
#ifndef GPIPE_NN_IR_NNOPS_H
#define GPIPE_NN_IR_NNOPS_H

#include "NN/IR/NNDialect.h"
#include "NN/IR/NNInterfaces.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "NN/IR/NNOps.h.inc"

namespace gpipe::nn {

/// Gives `op` the random stream `next` (and counts it) when it draws
/// random numbers and has none yet: dropout when training, attention with
/// dropout on its weights. Its backward draws from the same stream.
void numberRandomStream(mlir::Operation *op, int64_t &next,
                        mlir::Builder &builder);

} // namespace gpipe::nn

#endif // GPIPE_NN_IR_NNOPS_H
