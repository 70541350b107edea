#include "gpipe/runtime/DeviceList.h"

namespace gpipe::runtime {

std::vector<Device> parseDevices(const std::string &text) {
  std::vector<Device> devices;
  std::string error = ::gpipe::parseDeviceList(text, devices);
  if (!error.empty())
    throw DeviceListError(error);
  return devices;
}

} // namespace gpipe::runtime
