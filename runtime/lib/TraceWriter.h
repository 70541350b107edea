// Chrome / Perfetto trace files (JSON): one track per device, complete
// events for instructions and kernels.
#ifndef GPIPE_RUNTIME_TRACEWRITER_H
#define GPIPE_RUNTIME_TRACEWRITER_H

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
  };
  std::vector<Event> events;
};

/// Writes `tracks` to `path` atomically, times relative to `origin`.
void writeChromeTrace(const std::string &path,
                      const std::vector<TraceTrack> &tracks, double origin);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRACEWRITER_H
