//===- StageTarget.h - Code generation for one stage's device ---*- C++ -*-===//
//
// The compiler's backend seam: a lowered stage module becomes the code its
// device's runtime backend loads. Each stage is compiled by the target of
// its device; the native x86-64 target (a shared library of host code) is
// the first, a CUDA target (PTX/cubin plus host code) the next.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_TARGET_STAGETARGET_H
#define GPIPE_TARGET_STAGETARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpipe {

/// The CPU host code is generated for (gpipe-opt --target-cpu and
/// --target-features, resolveNativeTarget): LLVM's CPU name and feature
/// string, and the x86-64 extensions of gpipe/common/CpuFeatures.h it
/// enables, which the code may use and the manifest records; an empty
/// `cpu` is the host's.
struct NativeTargetSpec {
  std::string cpu, features;
  std::vector<std::string> required;
};

/// What the targets take from the command line.
struct StageTargetOptions {
  /// The GPU architecture CUDA stages are compiled for (gpipe-opt
  /// --cuda-arch): PTX for it, and a cubin when ptxas is found.
  std::string cudaArch = "sm_80";
  /// The CPU of the host code (CPU stages, and CUDA stages' host side).
  NativeTargetSpec native;
};

/// Device code that serialize() wrote beside the stage's library, for the
/// manifest: the kernels the host code launches by index and the files
/// that hold them (PTX, and a cubin for `arch` when one was assembled).
struct StageDeviceCode {
  std::string arch;
  std::vector<std::string> kernels;
  std::string ptxFile, cubinFile;
};

class StageTarget {
public:
  virtual ~StageTarget() = default;
  /// "native x86-64 (znver3)": what the target generates, for messages.
  virtual std::string describe() const = 0;
  /// The name of the stage's code file in the bundle ("stage0.so").
  virtual std::string codeFileName(int64_t stage) const = 0;
  /// Lowers a stage module to the target's dialects (gpipe-opt --emit=llvm).
  virtual mlir::LogicalResult lower(mlir::ModuleOp stage) = 0;
  /// Lowers and writes the stage's code to `path` (and its device code
  /// beside it, see deviceCode()).
  virtual mlir::LogicalResult serialize(mlir::ModuleOp stage,
                                        llvm::StringRef path) = 0;
  /// The device code the last serialize() wrote beside the library; none
  /// for host code only (CPU stages).
  virtual std::optional<StageDeviceCode> deviceCode() const {
    return std::nullopt;
  }
};

/// The target of a device of the manifest ("cpu", "cpu:0-3", "cuda:0");
/// an error at `stage`'s location for devices without one.
mlir::FailureOr<std::unique_ptr<StageTarget>>
createStageTarget(llvm::StringRef device, mlir::ModuleOp stage,
                  const StageTargetOptions &options = {});

} // namespace gpipe

#endif // GPIPE_TARGET_STAGETARGET_H
