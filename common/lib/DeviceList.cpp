#include "gpipe/common/DeviceList.h"

namespace gpipe {

namespace {

/// Parses a non-negative decimal integer that is the whole of `text`.
bool parseIndex(std::string_view text, int &value) {
  if (text.empty() || text.size() > 9)
    return false;
  value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    value = value * 10 + (c - '0');
  }
  return true;
}

std::string invalid(std::string_view item, const std::string &reason) {
  return "invalid device '" + std::string(item) + "': " + reason +
         " (expected cpu:N, cpu:A-B or cuda:N)";
}

/// Parses one item into `device`; returns "" or the error.
std::string parseDevice(std::string_view item, Device &device) {
  size_t colon = item.find(':');
  if (colon == std::string_view::npos)
    return invalid(item, "missing ':'");
  std::string_view kind = item.substr(0, colon), spec = item.substr(colon + 1);
  if (kind == "cpu") {
    device.kind = DeviceKind::Cpu;
    size_t dash = spec.find('-');
    int first = 0, last = 0;
    if (dash == std::string_view::npos) {
      if (!parseIndex(spec, first))
        return invalid(item, "the core must be a non-negative integer");
      last = first;
    } else if (!parseIndex(spec.substr(0, dash), first) ||
               !parseIndex(spec.substr(dash + 1), last)) {
      return invalid(item, "a core range is two non-negative integers A-B");
    }
    if (last < first)
      return invalid(item, "the core range is reversed");
    if (last - first >= 4096)
      return invalid(item, "the core range is too large");
    for (int core = first; core <= last; ++core)
      device.ids.push_back(core);
    return "";
  }
  if (kind == "cuda") {
    device.kind = DeviceKind::Cuda;
    int ordinal = 0;
    if (!parseIndex(spec, ordinal))
      return invalid(item, "the GPU must be a non-negative integer");
    device.ids.push_back(ordinal);
    return "";
  }
  return invalid(item, "unknown device kind '" + std::string(kind) + "'");
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

std::string parseDeviceList(std::string_view text,
                            std::vector<Device> &devices) {
  devices.clear();
  if (text.empty())
    return "the device list is empty";
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : comma - start);
    if (item.empty())
      return "the device list '" + std::string(text) + "' has an empty item";
    Device device;
    if (std::string error = parseDevice(item, device); !error.empty())
      return error;
    devices.push_back(std::move(device));
    if (comma == std::string_view::npos)
      return "";
    start = comma + 1;
  }
}

} // namespace gpipe
