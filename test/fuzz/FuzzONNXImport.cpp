//===- FuzzONNXImport.cpp - libFuzzer target for the ONNX importer --------===//
//
// Feeds arbitrary bytes to importONNXModel as a serialized ModelProto. The
// importer reports every problem as an error diagnostic and returns null;
// anything else (a crash, a sanitizer report, an exception escaping, a hang,
// a huge allocation) is a finding. Exceptions are not caught: gpipe-opt does
// not catch them either.
//
//===----------------------------------------------------------------------===//
#include "Import/ONNX/ModelImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace {

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  gpipe::registerONNXImportDialects(registry);
  return std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A context keeps every type and attribute it has uniqued (initializers'
  // constants included): a fresh one now and then keeps the memory flat.
  static std::unique_ptr<mlir::MLIRContext> context;
  static unsigned runs = 0;
  if (!context || ++runs % 1000 == 0)
    context = makeContext();
  // Errors are the expected outcome; printing them would only slow down.
  mlir::ScopedDiagnosticHandler quiet(
      context.get(), [](mlir::Diagnostic &) { return mlir::success(); });
  gpipe::ONNXImportOptions options;
  mlir::OwningOpRef<mlir::ModuleOp> module = gpipe::importONNXModel(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.onnx",
      context.get(), options);
  return 0;
}
