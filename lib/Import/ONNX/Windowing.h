//===- Windowing.h - Sliding-window attributes of ONNX ops ------*- C++ -*-===//
//
// Conv, MaxPool and AveragePool share kernel_shape, strides, pads, dilations
// and auto_pad; this resolves them into explicit per-axis arrays.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_WINDOWING_H
#define GPIPE_LIB_IMPORT_ONNX_WINDOWING_H

#include "GraphImporter.h"

namespace gpipe::onnx_import {

struct Window {
  llvm::SmallVector<int64_t> kernel, strides, pads, dilations;
};

/// Reads the window attributes of the current node for `input` (N, C,
/// spatial...). `kernelFromWeight` is the conv weight's spatial shape (the
/// kernel_shape attribute must then agree); pooling passes nullopt and needs
/// kernel_shape.
mlir::FailureOr<Window>
readWindow(GraphImporter &g, mlir::RankedTensorType input,
           std::optional<llvm::ArrayRef<int64_t>> kernelFromWeight);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_WINDOWING_H
