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

#endif // GPIPE_NN_IR_NNOPS_H
