#include "gpipe/runtime/DeviceList.h"

#include <cctype>
#include <limits>

namespace gpipe::runtime {

namespace {

/// Parses a non-negative decimal integer that is the whole of `text`.
bool parseIndex(const std::string &text, int &value) {
  if (text.empty() || text.size() > 9)
    return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  value = std::stoi(text);
  return true;
}

[[noreturn]] void fail(const std::string &item, const std::string &reason) {
  throw DeviceListError("invalid device '" + item + "': " + reason +
                        " (expected cpu:N, cpu:A-B or cuda:N)");
}

Device parseDevice(const std::string &item) {
  auto colon = item.find(':');
  if (colon == std::string::npos)
    fail(item, "missing ':'");
  std::string kind = item.substr(0, colon), spec = item.substr(colon + 1);
  Device device;
  if (kind == "cpu") {
    device.kind = DeviceKind::Cpu;
    auto dash = spec.find('-');
    int first = 0, last = 0;
    if (dash == std::string::npos) {
      if (!parseIndex(spec, first))
        fail(item, "the core must be a non-negative integer");
      last = first;
    } else if (!parseIndex(spec.substr(0, dash), first) ||
               !parseIndex(spec.substr(dash + 1), last)) {
      fail(item, "a core range is two non-negative integers A-B");
    }
    if (last < first)
      fail(item, "the core range is reversed");
    if (last - first >= 4096)
      fail(item, "the core range is too large");
    for (int core = first; core <= last; ++core)
      device.ids.push_back(core);
  } else if (kind == "cuda") {
    device.kind = DeviceKind::Cuda;
    int ordinal = 0;
    if (!parseIndex(spec, ordinal))
      fail(item, "the GPU must be a non-negative integer");
    device.ids.push_back(ordinal);
  } else {
    fail(item, "unknown device kind '" + kind + "'");
  }
  return device;
}

} // namespace

std::string Device::str() const {
  if (kind == DeviceKind::Cuda)
    return "cuda:" + std::to_string(ids.front());
  std::string s = "cpu:" + std::to_string(ids.front());
  if (ids.size() > 1)
    s += "-" + std::to_string(ids.back());
  return s;
}

std::vector<Device> parseDeviceList(const std::string &text) {
  if (text.empty())
    throw DeviceListError("the device list is empty");
  std::vector<Device> devices;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty())
      throw DeviceListError("the device list '" + text + "' has an empty item");
    devices.push_back(parseDevice(item));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return devices;
}

} // namespace gpipe::runtime
