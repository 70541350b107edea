//===- GPipeDialect.h - The gpipe dialect -----------------------*- C++ -*-===//
#ifndef GPIPE_GPIPE_IR_GPIPEDIALECT_H
#define GPIPE_GPIPE_IR_GPIPEDIALECT_H

#include "mlir/IR/Dialect.h"

#include "GPipe/IR/GPipeDialect.h.inc"

#endif // GPIPE_GPIPE_IR_GPIPEDIALECT_H
