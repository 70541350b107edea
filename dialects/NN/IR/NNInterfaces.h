//===- NNInterfaces.h - Interfaces of nn ops --------------------*- C++ -*-===//
#ifndef GPIPE_NN_IR_NNINTERFACES_H
#define GPIPE_NN_IR_NNINTERFACES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"

namespace gpipe::nn::detail {
/// Number of elements of a statically shaped type (1 for scalars).
int64_t numElements(mlir::Type type);
/// Bytes of a statically shaped tensor type.
int64_t numBytes(mlir::Type type);
/// One operation per result element.
int64_t defaultFlops(mlir::Operation *op);
/// All operand bytes plus all result bytes.
int64_t defaultBytesMoved(mlir::Operation *op);
/// CostOpInterface's verifier: the op's kernel families, forward and
/// backward, are families of common/'s table (gpipe/common/KernelFamily.h)
/// that the calibrator fits and the cost model prices.
mlir::LogicalResult verifyKernelFamilies(mlir::Operation *op);
/// ComputeTypeOpInterface's verifier: `compute_type` names a type the
/// backends multiply in (isComputeType).
mlir::LogicalResult verifyComputeType(mlir::Operation *op);
/// Whether `type` is a compute_type the backends know: "f32" or "bf16".
bool isComputeType(llvm::StringRef type);
} // namespace gpipe::nn::detail

#include "NN/IR/NNInterfaces.h.inc"

#endif // GPIPE_NN_IR_NNINTERFACES_H
