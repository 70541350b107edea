//===- ModelImporter.h - ONNX model to the nn dialect -----------*- C++ -*-===//
//
// Imports an ONNX ModelProto (opsets 11-17) as a module holding one
// gpipe.parameter per initializer used as a tensor and func.func @forward in
// the nn dialect with static shapes. Every problem with the file (parse
// errors, unsupported ops, inconsistent graphs and shapes) is reported as an
// error diagnostic on the context; the result is then null.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_IMPORT_ONNX_MODELIMPORTER_H
#define GPIPE_IMPORT_ONNX_MODELIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace gpipe {

struct ONNXImportOptions {
  /// Replaces the batch dimension of graph inputs (batchAxisOf).
  std::optional<int64_t> batchSize;
  /// --batch-axis: the dimension of a graph input that carries the batch,
  /// by input name ("" for every input; negative counts from the end).
  std::vector<std::pair<std::string, int64_t>> batchAxes;
  /// Graph inputs turned into compile-time constants: name -> serialized
  /// TensorProto (e.g. the shape argument of a Reshape).
  std::vector<std::pair<std::string, std::string>> constantInputs;
  /// Floating-point initializers not to train (--freeze), and, when not
  /// empty, the only ones to train (--trainable): glob patterns over their
  /// names. gpipe.compile passes a module's buffers as `freeze`.
  std::vector<std::string> freeze, trainable;
};

/// The default-domain opsets a model may import. Each op is imported by the
/// entry of the highest since-version <= the model's opset; an op whose form
/// at that opset gpipe does not know is an error naming the opset it needs.
/// Opsets 11-17 are the reference range and fully covered.
constexpr int64_t kMinONNXOpset = 1;
constexpr int64_t kMaxONNXOpset = 17;

/// Imports serialized ModelProto bytes; `fileName` names the model in
/// diagnostics and locations.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXModel(llvm::StringRef bytes, llvm::StringRef fileName,
                mlir::MLIRContext *context, const ONNXImportOptions &options);

/// Reads and imports an ONNX file.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXFile(llvm::StringRef path, mlir::MLIRContext *context,
               const ONNXImportOptions &options);

/// The static batch of a model file: the batch dimension (batchAxisOf) of
/// its first graph input (not an initializer), when that is a number; none
/// when it is symbolic (a dynamic_axes export); failure, with an error at
/// the file's location as the importer would emit it, when the file cannot
/// be read, is not an ONNX model or its batch dimension is ambiguous.
mlir::FailureOr<std::optional<int64_t>>
onnxStaticBatch(llvm::StringRef path, mlir::MLIRContext *context,
                const ONNXImportOptions &options = {});

/// "Add, AveragePool, ..." — every op type the importer accepts.
std::string supportedONNXOps();

/// "protobuf 3.21.12": the protobuf library the importer parses models with.
std::string protobufVersion();

/// Dialects the imported IR uses.
void registerONNXImportDialects(mlir::DialectRegistry &registry);

} // namespace gpipe

#endif // GPIPE_IMPORT_ONNX_MODELIMPORTER_H
