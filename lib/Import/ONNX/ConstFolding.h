//===- ConstFolding.h - Evaluating ops on ConstTensors ----------*- C++ -*-===//
//
// The few evaluations the importer needs to fold shape computations
// (Shape -> Gather -> Concat -> Reshape chains, Range, ConstantOfShape, the
// transposes of Pad's pads) into static attributes.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_CONSTFOLDING_H
#define GPIPE_LIB_IMPORT_ONNX_CONSTFOLDING_H

#include "ConstTensor.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <functional>
#include <optional>

namespace gpipe::onnx_import {

/// NumPy-broadcast element-wise function of several tensors: a tensor of
/// `dtype` and the broadcast shape whose element i `fn` writes, given the
/// flat index `at[k]` of the element of input k that it combines; nullopt
/// if the shapes do not broadcast.
std::optional<ConstTensor>
foldBroadcast(llvm::ArrayRef<const ConstTensor *> inputs, DType dtype,
              llvm::function_ref<void(llvm::ArrayRef<int64_t> at,
                                      ConstTensor &out, int64_t i)>
                  fn);

/// NumPy-broadcast element-wise op on two tensors of the same dtype; nullopt
/// if the shapes do not broadcast. Integer tensors use `intFn`, float ones
/// `floatFn`.
std::optional<ConstTensor>
foldBinary(const ConstTensor &a, const ConstTensor &b,
           const std::function<int64_t(int64_t, int64_t)> &intFn,
           const std::function<double(double, double)> &floatFn);

/// ONNX Gather along `axis` (already normalized); indices already checked
/// to be in range and made non-negative.
ConstTensor foldGather(const ConstTensor &data,
                       const std::vector<int64_t> &indices,
                       llvm::ArrayRef<int64_t> indicesShape, int64_t axis);

/// Concatenation along `axis` (already normalized, shapes checked).
ConstTensor foldConcat(llvm::ArrayRef<const ConstTensor *> inputs,
                       int64_t axis);

/// `data` broadcast to `shape` (NumPy rules, checked by the caller).
ConstTensor foldExpand(const ConstTensor &data, llvm::ArrayRef<int64_t> shape);

/// Transpose: output axis i is input axis perm[i] (perm checked to be a
/// permutation of the axes).
ConstTensor foldTranspose(const ConstTensor &data,
                          llvm::ArrayRef<int64_t> perm);

/// Strided slice with one clamped start/step per axis and output shape.
ConstTensor foldSlice(const ConstTensor &data, llvm::ArrayRef<int64_t> starts,
                      llvm::ArrayRef<int64_t> steps,
                      llvm::ArrayRef<int64_t> outShape);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_CONSTFOLDING_H
