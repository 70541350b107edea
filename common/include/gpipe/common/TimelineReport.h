//===- TimelineReport.h - The HTML report's step timelines ------*- C++ -*-===//
//
// One drawing for the compiler's predicted step (gpipe-opt --report) and
// the runtime's measured one (gpipe-run --report): a row per stage, a box
// per instruction, a time axis with ticks and a legend of the kinds drawn.
// Plain C++17, shared by both sides.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_COMMON_TIMELINEREPORT_H
#define GPIPE_COMMON_TIMELINEREPORT_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

struct TimelineBox {
  /// forward, backward, recompute, send, receive (the wait for a
  /// message), optimizer or all-reduce.
  std::string kind;
  int64_t microBatch = -1;
  double begin = 0, end = 0; // seconds from the start of the step
};

struct TimelineRow {
  std::string label; // "stage 0 · cpu:0"
  std::vector<TimelineBox> boxes;
};

struct Timeline {
  std::string title; // "predicted step", "measured step 12 of 40"
  std::vector<TimelineRow> rows;
  /// The step's length (the axis runs to the longest of a page's steps).
  double seconds = 0;
  /// Whether the stages recompute their forward in the backward (said in
  /// the legend).
  bool recompute = false;
};

/// A stage row's label: "stage 0 · cpu:0", or "stage 0 · r1:cpu:0" when
/// `rank` is given (a bundle of several ranks).
std::string timelineRowLabel(int64_t stage, const std::string &device,
                             int64_t rank = -1);

/// The kind a schedule instruction's name is drawn as ("send_activation"
/// -> "send", "optimizer_step" -> "optimizer"), or "" for instructions not
/// drawn.
std::string timelineKind(const std::string &instruction);

/// An SVG drawing of `timeline` with its axis running to `axisSeconds`
/// (0: the timeline's own length).
std::string timelineSVG(const Timeline &timeline, double axisSeconds = 0);

/// A self-contained page: the title, `preformatted` text (the stage
/// table) and the timelines drawn on one time scale, one above the other.
std::string timelineReportHTML(const std::string &title,
                               const std::string &preformatted,
                               const std::vector<Timeline> &timelines);

} // namespace gpipe

#endif // GPIPE_COMMON_TIMELINEREPORT_H
