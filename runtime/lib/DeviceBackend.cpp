#include "DeviceBackend.h"

#include "cpu/CpuBackend.h"

#include "gpipe/runtime/DeviceList.h"

namespace gpipe::runtime {

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
  throw BundleError(device +
                    ": this runtime has no CUDA backend yet (stages on "
                    "cuda:N cannot run; compile for cpu devices)");
}

} // namespace gpipe::runtime
