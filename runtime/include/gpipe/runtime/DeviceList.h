// Parsing of the device lists of gpipe-opt --devices and gpipe-run.
#ifndef GPIPE_RUNTIME_DEVICELIST_H
#define GPIPE_RUNTIME_DEVICELIST_H

#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime {

enum class DeviceKind { Cpu, Cuda };

/// One pipeline device: `cpu:N` (one core), `cpu:A-B` (cores A..B), or
/// `cuda:N` (one GPU).
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  /// CPU: the cores, in order. CUDA: one entry, the device ordinal.
  std::vector<int> ids;

  /// "cpu:0", "cpu:2-5", "cuda:1".
  std::string str() const;
  bool operator==(const Device &other) const {
    return kind == other.kind && ids == other.ids;
  }
};

/// A malformed device list, with the offending item and the reason.
class DeviceListError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// Parses "cpu:0,cpu:1-3,cuda:0". Devices may repeat (several stages on one
/// device); empty items, unknown kinds, negative or reversed ranges are
/// errors.
std::vector<Device> parseDeviceList(const std::string &text);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_DEVICELIST_H
