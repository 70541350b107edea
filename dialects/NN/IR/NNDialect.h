//===- NNDialect.h - The nn dialect -----------------------------*- C++ -*-===//
#ifndef GPIPE_NN_IR_NNDIALECT_H
#define GPIPE_NN_IR_NNDIALECT_H

#include "mlir/IR/Dialect.h"

#include "NN/IR/NNDialect.h.inc"

#endif // GPIPE_NN_IR_NNDIALECT_H
