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
  /// NOTSET, VALID, SAME_UPPER or SAME_LOWER (checked).
  std::string autoPad = "NOTSET";
};

/// The window attributes as written, checked (sizes, positive kernel,
/// strides and dilations, a known auto_pad) but with auto_pad not yet
/// applied to the pads: ConvTranspose applies it its own way.
mlir::FailureOr<Window>
readWindowAttrs(GraphImporter &g, size_t spatial,
                std::optional<llvm::ArrayRef<int64_t>> kernelFromWeight);

/// Reads the window attributes of the current node for `input` (N, C,
/// spatial...). `kernelFromWeight` is the conv weight's spatial shape (the
/// kernel_shape attribute must then agree); pooling passes nullopt and needs
/// kernel_shape.
mlir::FailureOr<Window>
readWindow(GraphImporter &g, mlir::RankedTensorType input,
           std::optional<llvm::ArrayRef<int64_t>> kernelFromWeight);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_WINDOWING_H
