// The device grammar of gpipe-opt --devices and of the bundle's manifest.
#ifndef GPIPE_COMMON_DEVICELIST_H
#define GPIPE_COMMON_DEVICELIST_H

#include <string>
#include <string_view>
#include <vector>

namespace gpipe {

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

/// Parses "cpu:0,cpu:1-3,cuda:0" into `devices`. Devices may repeat
/// (several stages on one device); empty items, unknown kinds, negative or
/// reversed ranges are errors. Returns "" on success, else a message that
/// names the offending item and the grammar.
std::string parseDeviceList(std::string_view text,
                            std::vector<Device> &devices);

} // namespace gpipe

#endif // GPIPE_COMMON_DEVICELIST_H
