//===- StageTarget.cpp - The target of a stage's device -------------------===//
#include "Target/StageTarget.h"

#include "Target/CUDA/CudaCodegen.h"
#include "Target/Native/NativeCodegen.h"

#include "gpipe/common/DeviceList.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace {

/// Host code for CPU stages: a shared library for the target CPU (the
/// host's unless --target-cpu says otherwise).
class NativeTarget : public gpipe::StageTarget {
public:
  explicit NativeTarget(gpipe::NativeTargetSpec cpu) : cpu(std::move(cpu)) {}
  std::string describe() const override {
    return "native x86-64 (" + (cpu.cpu.empty() ? "host" : cpu.cpu) + ")";
  }
  std::string codeFileName(int64_t stage) const override {
    return "stage" + std::to_string(stage) + ".so";
  }
  LogicalResult lower(ModuleOp stage) override {
    return gpipe::lowerStageToLLVMDialect(stage);
  }
  LogicalResult serialize(ModuleOp stage, llvm::StringRef path) override {
    return gpipe::emitStageLibrary(stage, path, cpu);
  }

private:
  gpipe::NativeTargetSpec cpu;
};

/// CUDA stages: GPU kernels as PTX (and a cubin for the architecture when
/// ptxas is found), and host code, a shared library as for CPU stages,
/// that runs the stage's phases by launching them and the runtime's
/// library kernels (CudaCodegen.h).
class CudaTarget : public gpipe::StageTarget {
public:
  CudaTarget(std::string arch, gpipe::NativeTargetSpec host)
      : arch(std::move(arch)), host(std::move(host)) {}
  std::string describe() const override {
    return "CUDA " + arch + " (PTX) with native x86-64 host code";
  }
  std::string codeFileName(int64_t stage) const override {
    return "stage" + std::to_string(stage) + ".so";
  }
  LogicalResult lower(ModuleOp stage) override {
    gpipe::CudaDeviceCode code;
    if (failed(gpipe::outlineCudaKernels(stage, arch, code)))
      return failure();
    return gpipe::lowerStageToLLVMDialect(stage);
  }
  LogicalResult serialize(ModuleOp stage, llvm::StringRef path) override {
    gpipe::CudaDeviceCode code;
    if (failed(gpipe::outlineCudaKernels(stage, arch, code)) ||
        failed(gpipe::emitStageLibrary(stage, path, host)))
      return failure();
    written = gpipe::StageDeviceCode{arch, code.kernels, "", ""};
    if (code.kernels.empty())
      return success();
    llvm::SmallString<256> ptx(path);
    llvm::sys::path::replace_extension(ptx, "ptx");
    if (failed(writeFile(stage, ptx, code.ptx)))
      return failure();
    written->ptxFile = llvm::sys::path::filename(ptx).str();
    // The PTX assembled for the architecture asked for: checks it at
    // compile time and spares the driver's JIT at load time.
    std::string ptxas = gpipe::findPtxas();
    if (ptxas.empty())
      return success();
    std::string cubin, error;
    if (!gpipe::assemblePtx(code.ptx, arch, ptxas, cubin, error))
      return stage.emitError("CUDA stage: ") << error;
    llvm::SmallString<256> cubinPath(path);
    llvm::sys::path::replace_extension(cubinPath, arch + ".cubin");
    if (failed(writeFile(stage, cubinPath, cubin)))
      return failure();
    written->cubinFile = llvm::sys::path::filename(cubinPath).str();
    return success();
  }
  std::optional<gpipe::StageDeviceCode> deviceCode() const override {
    return written;
  }

private:
  static LogicalResult writeFile(ModuleOp stage, llvm::StringRef path,
                                 llvm::StringRef bytes) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
    if (ec)
      return stage.emitError("cannot write ") << path << ": " << ec.message();
    os << bytes;
    return success();
  }

  std::string arch;
  gpipe::NativeTargetSpec host;
  std::optional<gpipe::StageDeviceCode> written;
};

} // namespace

FailureOr<std::unique_ptr<gpipe::StageTarget>>
gpipe::createStageTarget(llvm::StringRef device, ModuleOp stage,
                         const StageTargetOptions &options) {
  std::vector<Device> devices;
  if (device != "cpu") {
    std::string error = parseDeviceList(device, devices);
    if (!error.empty() || devices.size() != 1)
      return stage.emitError("stage device '")
             << device
             << "': " << (error.empty() ? "a stage runs on one device" : error);
    if (devices.front().kind == DeviceKind::Cuda) {
      llvm::StringRef arch = options.cudaArch;
      unsigned number = 0;
      if (!arch.consume_front("sm_") || arch.getAsInteger(10, number) ||
          number < 75)
        return stage.emitError("--cuda-arch=")
               << options.cudaArch
               << ": expected sm_NN with NN at least 75 (sm_80 for A100, "
                  "sm_90 for H100; the CUDA 13 toolkit has no older ones)";
      return std::unique_ptr<StageTarget>(
          std::make_unique<CudaTarget>(options.cudaArch, options.native));
    }
  }
  return std::unique_ptr<StageTarget>(
      std::make_unique<NativeTarget>(options.native));
}
