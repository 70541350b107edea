#include "DeviceBackend.h"

#include <stdexcept>

#include "Clock.h"
#include "CudaPlugin.h"
#include "cpu/CpuBackend.h"

#include "gpipe/runtime/DeviceList.h"

namespace gpipe::runtime {

namespace {
[[noreturn]] void noBf16Stash(const std::string &device) {
  throw std::runtime_error(device +
                           ": this device keeps no bfloat16 stash "
                           "(compile the model with --precision=fp32)");
}
} // namespace

void DeviceBackend::roundToBf16(char *, const char *, int64_t) {
  noBf16Stash(name());
}

void DeviceBackend::widenBf16(char *, const char *, int64_t) {
  noBf16Stash(name());
}

int64_t DeviceBackend::mark() {
  marks.push_back(steadySeconds());
  return static_cast<int64_t>(marks.size()) - 1;
}

std::unique_ptr<DeviceBackend> createBackend(const std::string &device) {
  // "cpu" is the whole host, unpinned.
  std::vector<Device> devices =
      device == "cpu" ? std::vector<Device>{Device{}} : parseDevices(device);
  if (devices.size() != 1)
    throw BundleError("a stage runs on one device, not '" + device + "'");
  switch (devices.front().kind) {
  case DeviceKind::Cpu:
    return std::make_unique<cpu::CpuBackend>(device);
  case DeviceKind::Cuda:
    break;
  }
  std::string reason;
  if (const CudaPluginApi *cuda = cudaPlugin(&reason))
    return cuda->createBackend(device,
                               static_cast<int>(devices.front().ids.front()));
  throw BundleError(device + ": " + reason +
                    " (stages on cuda:N cannot run; build the runtime where "
                    "the CUDA toolkit is installed, or compile for cpu "
                    "devices)");
}

} // namespace gpipe::runtime
