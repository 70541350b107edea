// The process's resident memory as the kernel counts it (/proc/self/status):
// what gpipe-run's summary sets against the memory plan.
#ifndef GPIPE_RUNTIME_PROCESSMEMORY_H
#define GPIPE_RUNTIME_PROCESSMEMORY_H

#include <cstdint>

namespace gpipe::runtime {

/// Resident bytes now (VmRSS), and the most the process has held so far
/// (VmHWM); 0 where /proc does not say.
int64_t residentBytes();
int64_t peakResidentBytes();

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_PROCESSMEMORY_H
