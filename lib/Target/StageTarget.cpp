//===- StageTarget.cpp - The target of a stage's device -------------------===//
#include "Target/StageTarget.h"

#include "Target/Native/NativeCodegen.h"

#include "gpipe/common/DeviceList.h"

using namespace mlir;

namespace {

/// Host code for CPU stages: a shared library for this machine's CPU.
class NativeTarget : public gpipe::StageTarget {
public:
  std::string describe() const override {
    return "native x86-64 (" + gpipe::nativeTargetCPU() + ")";
  }
  std::string codeFileName(int64_t stage) const override {
    return "stage" + std::to_string(stage) + ".so";
  }
  LogicalResult lower(ModuleOp stage) override {
    return gpipe::lowerStageToLLVMDialect(stage);
  }
  LogicalResult serialize(ModuleOp stage, llvm::StringRef path) override {
    return gpipe::emitStageLibrary(stage, path);
  }
};

} // namespace

FailureOr<std::unique_ptr<gpipe::StageTarget>>
gpipe::createStageTarget(llvm::StringRef device, ModuleOp stage) {
  std::vector<Device> devices;
  if (device != "cpu") {
    std::string error = parseDeviceList(device, devices);
    if (!error.empty() || devices.size() != 1)
      return stage.emitError("stage device '")
             << device
             << "': " << (error.empty() ? "a stage runs on one device" : error);
    if (devices.front().kind == DeviceKind::Cuda)
      return stage.emitError("stage device '")
             << device
             << "': CUDA stages are not implemented yet (no CUDA stage "
                "target); use cpu devices";
  }
  return std::unique_ptr<StageTarget>(std::make_unique<NativeTarget>());
}
