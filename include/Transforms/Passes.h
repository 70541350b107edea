//===- Passes.h - gpipe passes ----------------------------------*- C++ -*-===//
#ifndef GPIPE_TRANSFORMS_PASSES_H
#define GPIPE_TRANSFORMS_PASSES_H

#include "GPipe/IR/GPipeDialect.h"
#include "NN/IR/NNDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace gpipe {

/// On a loop of gpipe-lower-stage's row copies (Slice, Concat, Split of
/// rows): each iteration copies one row to a place of its own, so the
/// iterations may run in any order or at once.
constexpr llvm::StringLiteral kIndependentRowsAttr = "gpipe.independent_rows";

#define GEN_PASS_DECL
#include "Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Transforms/Passes.h.inc"

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_PASSES_H
