// Chrome / Perfetto trace files (JSON): one track per device, complete
// events for instructions and kernels.
#ifndef GPIPE_RUNTIME_TRACEWRITER_H
#define GPIPE_RUNTIME_TRACEWRITER_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::runtime {

struct TraceTrack {
  std::string name;
  int64_t stage = -1;
  struct Event {
    std::string name;
    const char *category;
    double begin, end; // seconds on the steady clock
    /// The event's details, a JSON object ("{}" for none).
    std::string args = "{}";
    /// Arrows from a send to its receive: the same non-zero id on both.
    uint64_t flowOut = 0, flowIn = 0;
    /// The traced step an instruction belongs to (step markers), or -1.
    int64_t step = -1;
  };
  std::vector<Event> events;
};

/// Writes `tracks` to `path` atomically, times relative to `origin`: a
/// thread per track, flow arrows from sends to their receives, and an
/// instant marker at the start of every step.
void writeChromeTrace(const std::string &path,
                      const std::vector<TraceTrack> &tracks, double origin);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRACEWRITER_H
