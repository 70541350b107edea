#include "TraceWriter.h"

#include "gpipe/runtime/FileIO.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace gpipe::runtime {

void writeChromeTrace(const std::string &path,
                      const std::vector<TraceTrack> &tracks, double origin) {
  nlohmann::json events = nlohmann::json::array();
  auto us = [&](double t) { return (t - origin) * 1e6; };
  std::map<int64_t, double> stepStart;
  for (size_t tid = 0; tid < tracks.size(); ++tid) {
    const TraceTrack &track = tracks[tid];
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", tid},
                      {"args", {{"name", track.name}}}});
    for (const TraceTrack::Event &e : track.events) {
      nlohmann::json args = nlohmann::json::parse(e.args, nullptr, false);
      events.push_back(
          {{"name", e.name},
           {"cat", e.category},
           {"ph", "X"},
           {"pid", 0},
           {"tid", tid},
           {"ts", us(e.begin)},
           {"dur", (e.end - e.begin) * 1e6},
           {"args", args.is_object() ? args : nlohmann::json::object()}});
      // A message's arrow: from its send's slice to its receive's.
      if (e.flowOut)
        events.push_back({{"name", "message"},
                          {"cat", "transfer"},
                          {"ph", "s"},
                          {"id", e.flowOut},
                          {"pid", 0},
                          {"tid", tid},
                          {"ts", us(e.begin)}});
      if (e.flowIn)
        events.push_back({{"name", "message"},
                          {"cat", "transfer"},
                          {"ph", "f"},
                          {"bp", "e"},
                          {"id", e.flowIn},
                          {"pid", 0},
                          {"tid", tid},
                          {"ts", us(e.begin)}});
      if (e.step >= 0) {
        auto [it, added] = stepStart.emplace(e.step, e.begin);
        if (!added)
          it->second = std::min(it->second, e.begin);
      }
    }
  }
  for (auto [step, begin] : stepStart)
    events.push_back({{"name", "step " + std::to_string(step + 1)},
                      {"cat", "step"},
                      {"ph", "i"},
                      {"s", "g"},
                      {"pid", 0},
                      {"tid", 0},
                      {"ts", us(begin)}});
  nlohmann::json trace{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  writeFileAtomically(path, trace.dump());
}

} // namespace gpipe::runtime
