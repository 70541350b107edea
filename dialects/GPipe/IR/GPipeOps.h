//===- GPipeOps.h - Ops of the gpipe dialect --------------------*- C++ -*-===//
#ifndef GPIPE_GPIPE_IR_GPIPEOPS_H
#define GPIPE_GPIPE_IR_GPIPEOPS_H

#include "GPipe/IR/GPipeDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "GPipe/IR/GPipeOps.h.inc"

#endif // GPIPE_GPIPE_IR_GPIPEOPS_H
