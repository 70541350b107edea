//===- GradientReach.h - Initializers no gradient reaches -------*- C++ -*-===//
//
// ONNX does not say which initializers a model trains: PyTorch exports its
// buffers (a causal mask, position ids) as initializers like its
// parameters. A floating-point initializer is trained when a gradient can
// flow to it from a graph output; this analysis finds those it cannot reach
// (used only as a comparison operand, a `Where` condition, indices, shapes,
// or not used at all), so that the importer freezes and folds them.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_GRADIENTREACH_H
#define GPIPE_LIB_IMPORT_ONNX_GRADIENTREACH_H

#include "llvm/ADT/StringMap.h"

#include <string>

namespace onnx {
class GraphProto;
} // namespace onnx

namespace gpipe::onnx_import {

/// Floating-point initializers not to train, each with the reason in
/// words: those no output's gradient reaches, and those that hold
/// infinities or NaNs (an additive mask kept as a buffer; whatever reaches
/// it, a trained copy would be NaN after one step).
llvm::StringMap<std::string>
initializersWithoutGradient(const onnx::GraphProto &graph);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_GRADIENTREACH_H
