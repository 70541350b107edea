#include "ProcessMemory.h"

#include <fstream>
#include <string>

namespace gpipe::runtime {

namespace {
/// The "NAME: N kB" line of /proc/self/status, in bytes.
int64_t statusBytes(const std::string &name) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(name + ":", 0) == 0) {
      try {
        return std::stoll(line.substr(name.size() + 1)) * 1024;
      } catch (const std::exception &) {
        return 0;
      }
    }
  return 0;
}
} // namespace

int64_t residentBytes() { return statusBytes("VmRSS"); }

int64_t peakResidentBytes() { return statusBytes("VmHWM"); }

} // namespace gpipe::runtime
