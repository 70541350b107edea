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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace gpipe {

/// Whether `v` is a float32 tensor whose every use that `counts` selects
/// (all of them when null) is a product's operand rounded to bfloat16: the
/// `a` or `b` of an nn.gemm, an operand of an nn.matmul, with compute_type
/// "bf16", directly or through nn.reshape and nn.transpose (which move
/// values without changing them). True for a value without such uses (a
/// split backward's input part does not read what only its weight part
/// multiplies).
bool onlyMultipliedInBf16(
    mlir::Value v,
    llvm::function_ref<bool(mlir::Operation *)> counts = nullptr);

/// Whether the backward phase `f`'s argument `index`, a value the forward
/// kept (its role is stash or activation), may be kept in bfloat16: what
/// the memory plan counts and the bundle's wiring lays out. For a split
/// backward's input part ("backward_input"), the weight part
/// ("backward_weight", beside it in the module, not yet lowered) that
/// reads the same value again must only multiply it in bfloat16 too.
bool keptInBf16(mlir::func::FuncOp f, unsigned index);

/// The stash bytes of a float32 tensor of `bytes` kept in bfloat16: half,
/// rounded up to 4 (the next kept tensor's float32 alignment).
constexpr int64_t bf16StashBytes(int64_t bytes) {
  return (bytes / 2 + 3) / 4 * 4;
}

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_STASHPRECISION_H
