// The device grammar (common/include/gpipe/common/DeviceList.h) for the
// runtime: errors are exceptions.
#ifndef GPIPE_RUNTIME_DEVICELIST_H
#define GPIPE_RUNTIME_DEVICELIST_H

#include "gpipe/common/DeviceList.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime {

using ::gpipe::Device;
using ::gpipe::DeviceKind;

/// A malformed device list, with the offending item and the reason.
class DeviceListError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

/// Parses "cpu:0,cpu:1-3,cuda:0"; throws DeviceListError.
std::vector<Device> parseDevices(const std::string &text);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_DEVICELIST_H
