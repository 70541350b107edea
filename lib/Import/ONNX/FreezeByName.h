//===- FreezeByName.h - Initializers the user freezes by name ---*- C++ -*-===//
//
// ONNX stores a module's buffers and its parameters alike as initializers.
// The importer freezes those it can tell are buffers (GradientReach.h); the
// user names the rest: `--freeze=PATTERNS` (these are not trained) and
// `--trainable=PATTERNS` (only these are trained), glob patterns over the
// initializers' names. gpipe.compile passes a module's named_buffers().
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_FREEZEBYNAME_H
#define GPIPE_LIB_IMPORT_ONNX_FREEZEBYNAME_H

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace onnx {
class GraphProto;
} // namespace onnx

namespace gpipe::onnx_import {

/// The floating-point initializers of `graph` that `freeze` names, or that
/// `trainable` (when not empty) does not, each with the reason in words.
/// Patterns are globs (`*`, `?`, `[...]`) matched against whole names. A
/// pattern that matches no floating-point initializer is an error listing
/// some of the model's (a typo would otherwise train what it meant to
/// freeze); so is freezing every one of them.
llvm::Expected<llvm::StringMap<std::string>>
initializersFrozenByName(const onnx::GraphProto &graph,
                         const std::vector<std::string> &freeze,
                         const std::vector<std::string> &trainable);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_FREEZEBYNAME_H
