//===- NativeCodegen.h - Stage modules to x86-64 shared libraries -*- C++ -*-=//
//
// After gpipe-lower-stage, a stage module holds linalg on memrefs, arith,
// math and calls into the runtime. This lowers it through upstream MLIR
// conversions to the LLVM dialect, translates it to LLVM IR, optimizes it
// for the target CPU (the host's unless told), emits an object file and links
// it with lld (in process) into a shared library whose undefined kernel symbols
// resolve against the runtime when it is loaded.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_TARGET_NATIVE_NATIVECODEGEN_H
#define GPIPE_TARGET_NATIVE_NATIVECODEGEN_H

#include "Target/StageTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace gpipe {

/// The target of `cpu` ("host", an x86-64 level such as "x86-64-v3", or a
/// CPU of LLVM's: "znver4", "sapphirerapids") with `features` changed
/// (LLVM's names, "+avx512f,-avx512fp16"; empty: none): the CPU's name
/// ("host" resolved to this machine's), the feature string for LLVM and
/// the extensions the code may use. An error names the flag, the unknown
/// name and what is accepted.
llvm::Expected<NativeTargetSpec> resolveNativeTarget(llvm::StringRef cpu,
                                                     llvm::StringRef features);

/// Lowers a stage module in place to the LLVM dialect (bare-pointer calling
/// convention for memref arguments).
mlir::LogicalResult lowerStageToLLVMDialect(mlir::ModuleOp module);

/// Lowers, optimizes (O3) for `target` (resolved: resolveNativeTarget) and
/// links `module` into the shared library at `path`. Errors are emitted as
/// diagnostics on the module. Linking runs lld in process, which resets every
/// LLVM command-line option to its default: tools read their options before
/// calling this.
mlir::LogicalResult emitStageLibrary(mlir::ModuleOp module,
                                     llvm::StringRef path,
                                     const NativeTargetSpec &target);

} // namespace gpipe

#endif // GPIPE_TARGET_NATIVE_NATIVECODEGEN_H
