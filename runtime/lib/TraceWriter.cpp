#include "TraceWriter.h"

#include "gpipe/runtime/FileIO.h"

#include <nlohmann/json.hpp>

namespace gpipe::runtime {

void writeChromeTrace(const std::string &path,
                      const std::vector<TraceTrack> &tracks, double origin) {
  nlohmann::json events = nlohmann::json::array();
  auto us = [&](double t) { return (t - origin) * 1e6; };
  for (size_t tid = 0; tid < tracks.size(); ++tid) {
    const TraceTrack &track = tracks[tid];
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", tid},
                      {"args", {{"name", track.name}}}});
    for (const TraceTrack::Event &e : track.events)
      events.push_back({{"name", e.name},
                        {"cat", e.category},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", tid},
                        {"ts", us(e.begin)},
                        {"dur", (e.end - e.begin) * 1e6}});
  }
  nlohmann::json trace{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  writeFileAtomically(path, trace.dump());
}

} // namespace gpipe::runtime
