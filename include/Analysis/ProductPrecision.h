//===- ProductPrecision.h - Values only multiplied in bfloat16 --*- C++ -*-===//
//
// Under --precision=bf16 a product of matrices rounds its operands to
// bfloat16 before it multiplies (ComputeTypeOpInterface). A value whose
// every use is such an operand may be held in bfloat16 (in the stash, in a
// message): the product rounds the held value to itself, so the numbers
// are the same to the last bit, on half the bytes.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PRODUCTPRECISION_H
#define GPIPE_ANALYSIS_PRODUCTPRECISION_H

#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
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

/// The bytes of a float32 tensor of `bytes` held in bfloat16 (in the
/// stash or a message): half,
/// rounded up to 4 (the next kept tensor's float32 alignment).
constexpr int64_t bf16StashBytes(int64_t bytes) {
  return (bytes / 2 + 3) / 4 * 4;
}

/// The bytes of the bfloat16 copies the CPU runtime keeps of a float32
/// parameter of `bytes` read as `reads` (the results of its get_parameter
/// ops, in any phase): one in its own element order where a bfloat16 Gemm
/// or MatMul multiplies it (the device's one copy, which the forward and
/// the input gradient both read: OneDnn::bf16Param), and one in the
/// blocked layout of each kind of bfloat16 convolution kernel reading it
/// as its weight (nn.conv, nn.conv_grad_input); each half the parameter's
/// bytes (a convolution the CPU backend runs in its own float32 loops,
/// a first layer of few input channels, keeps none: counted all the
/// same, its weights are a few hundred floats). `convGradInput`: count an
/// nn.conv's input gradient as such a reader before autodiff has made it (the
/// planner's forward model).
int64_t bf16CopyBytes(llvm::ArrayRef<mlir::Value> reads, int64_t bytes,
                      bool convGradInput = false);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PRODUCTPRECISION_H
