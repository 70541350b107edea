//===- StashPrecision.h - What the stash may keep in bfloat16 ---*- C++ -*-===//
//
// Under --precision=bf16 a product of matrices rounds its operands to
// bfloat16 before it multiplies (ComputeTypeOpInterface). A value kept for
// the backward whose every use there is such an operand may be kept in
// bfloat16: the product rounds the kept value to itself, so the training
// is the same to the last bit, with half the bytes in the stash.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_TRANSFORMS_STASHPRECISION_H
#define GPIPE_TRANSFORMS_STASHPRECISION_H

#include "Analysis/ProductPrecision.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Value.h"

namespace gpipe {

/// Whether the backward phase `f`'s argument `index`, a value the forward
/// kept (its role is stash or activation), may be kept in bfloat16: what
/// the memory plan counts and the bundle's wiring lays out. For a split
/// backward's input part ("backward_input"), the weight part
/// ("backward_weight", beside it in the module, not yet lowered) that
/// reads the same value again must only multiply it in bfloat16 too.
bool keptInBf16(mlir::func::FuncOp f, unsigned index);

/// Whether the forward phase `f`'s argument `index`, an activation the
/// stage before sends, may come in bfloat16: the forward and every
/// backward phase beside it in the module that reads the value again
/// (whole or split, with recompute too) only multiply it in bfloat16, so
/// the stage trains the same to the last bit on half the message. What
/// the bundle's wiring lays out (the receiver's `message_dtype`).
bool receivedInBf16(mlir::func::FuncOp f, unsigned index);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_STASHPRECISION_H
