// The CUDA plugin's entry point (runtime/lib/CudaPlugin.h).
#include "CudaPlugin.h"

#include "cuda/CudaBackend.h"

namespace gpipe::runtime::cuda {
namespace {

std::unique_ptr<DeviceBackend> createBackend(const std::string &device,
                                             int ordinal) {
  return std::make_unique<CudaBackend>(device, ordinal);
}

const CudaPluginApi api{CudaPluginApi::kAbi, createBackend, deviceCount,
                        version, calibrate};

} // namespace
} // namespace gpipe::runtime::cuda

extern "C" const gpipe::runtime::CudaPluginApi *gpipe_cuda_plugin_api() {
  return &gpipe::runtime::cuda::api;
}
