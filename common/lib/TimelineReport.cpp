#include "gpipe/common/TimelineReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace gpipe {

namespace {

struct KindStyle {
  const char *kind, *color, *label;
};

/// In legend order.
constexpr KindStyle kKinds[] = {
    {"forward", "#4c8bf5", "forward"},
    {"recompute", "#8e6fd8", "recompute"},
    {"backward", "#f5a742", "backward"},
    {"backward_weight", "#e0c341",
     "weight gradients (the backward's second "
     "part)"},
    {"send", "#3aa66a", "send"},
    {"receive", "#c9ced6", "waiting for a receive"},
    {"optimizer", "#d9534f", "optimizer step"},
    {"all-reduce", "#17a2b8", "gradient all-reduce"},
};

const KindStyle *styleOf(const std::string &kind) {
  for (const KindStyle &k : kKinds)
    if (kind == k.kind)
      return &k;
  return nullptr;
}

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '\'')
      out += "&#39;";
    else
      out += c;
  }
  return out;
}

std::string format(const char *fmt, double a) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, a);
  return text;
}

/// "0.25 ms", "12 ms", "1.5 s".
std::string timeText(double seconds) {
  if (seconds >= 1)
    return format("%g s", std::round(seconds * 1000) / 1000);
  return format("%g ms", std::round(seconds * 1e6) / 1000);
}

/// The smallest interval of 1, 2 or 5 x 10^k that gives at most 10 ticks
/// (so 4 to 10 of them).
double tickInterval(double span) {
  double step = std::pow(10, std::floor(std::log10(span)) - 1);
  for (double m : {1.0, 2.0, 5.0, 10.0, 20.0, 50.0})
    if (span / (step * m) <= 10)
      return step * m;
  return step * 100;
}

constexpr double kWidth = 1000, kLeft = 150, kRight = 20, kRowHeight = 28,
                 kBoxHeight = 20, kTop = 8, kAxisHeight = 34,
                 kLegendHeight = 26;

} // namespace

std::string timelineRowLabel(int64_t stage, const std::string &device,
                             int64_t rank) {
  return "stage " + std::to_string(stage) + " \u00b7 " +
         (rank >= 0 ? "r" + std::to_string(rank) + ":" : std::string()) +
         device;
}

std::string timelineKind(const std::string &instruction) {
  if (instruction == "forward" || instruction == "backward" ||
      instruction == "recompute" || instruction == "backward_weight")
    return instruction;
  // A split backward's first part: what the previous stage waits for.
  if (instruction == "backward_input")
    return "backward";
  if (instruction.rfind("send_", 0) == 0)
    return "send";
  if (instruction.rfind("recv_", 0) == 0)
    return "receive";
  if (instruction == "optimizer_step")
    return "optimizer";
  if (instruction == "all_reduce" || instruction == "all-reduce")
    return "all-reduce";
  return "";
}

std::string timelineSVG(const Timeline &t, double axisSeconds) {
  double axis = axisSeconds > 0 ? axisSeconds : t.seconds;
  if (!(axis > 0))
    axis = 1e-3;
  double plot = kWidth - kLeft - kRight;
  double scale = plot / axis;
  double rowsHeight = kRowHeight * static_cast<double>(t.rows.size());
  double height = kTop + rowsHeight + kAxisHeight + kLegendHeight;
  std::string s;
  s += "<svg xmlns='http://www.w3.org/2000/svg' class='timeline' width='" +
       format("%.0f", kWidth) + "' height='" + format("%.0f", height) +
       "' font-family='sans-serif' font-size='11' data-seconds='" +
       format("%.9g", t.seconds) + "' data-axis-seconds='" +
       format("%.9g", axis) + "' data-plot-left='" + format("%.0f", kLeft) +
       "' data-plot-width='" + format("%.0f", plot) + "'>\n";
  // Grid and axis.
  double tick = tickInterval(axis);
  double axisY = kTop + rowsHeight + 4;
  for (double v = 0; v <= axis * (1 + 1e-9); v += tick) {
    double x = kLeft + v * scale;
    s += "<line class='grid' x1='" + format("%.1f", x) + "' y1='" +
         format("%.1f", kTop) + "' x2='" + format("%.1f", x) + "' y2='" +
         format("%.1f", axisY) + "' stroke='#e3e6ea'/>\n";
    s += "<text class='tick' x='" + format("%.1f", x) + "' y='" +
         format("%.1f", axisY + 14) + "' text-anchor='middle'>" + timeText(v) +
         "</text>\n";
  }
  s += "<line class='axis' x1='" + format("%.1f", kLeft) + "' y1='" +
       format("%.1f", axisY) + "' x2='" + format("%.1f", kLeft + plot) +
       "' y2='" + format("%.1f", axisY) + "' stroke='#555'/>\n";
  // Rows.
  std::set<std::string> drawn;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const TimelineRow &row = t.rows[r];
    double y = kTop + kRowHeight * static_cast<double>(r);
    s += "<text class='row-label' x='4' y='" +
         format("%.1f", y + kBoxHeight / 2 + 4) + "'>" + escape(row.label) +
         "</text>\n";
    for (const TimelineBox &b : row.boxes) {
      const KindStyle *style = styleOf(b.kind);
      if (!style || b.end < b.begin)
        continue;
      drawn.insert(b.kind);
      double x = kLeft + b.begin * scale;
      double w = std::max((b.end - b.begin) * scale, 0.5);
      std::string what =
          std::string(style->label) +
          (b.microBatch >= 0 ? " of micro-batch " + std::to_string(b.microBatch)
                             : "");
      s += "<rect class='box " + b.kind + "' data-row='" + std::to_string(r) +
           "' data-micro-batch='" + std::to_string(b.microBatch) +
           "' data-begin='" + format("%.9g", b.begin) + "' data-end='" +
           format("%.9g", b.end) + "' x='" + format("%.2f", x) + "' y='" +
           format("%.1f", y) + "' width='" + format("%.2f", w) + "' height='" +
           format("%.0f", kBoxHeight) + "' fill='" + style->color +
           "' stroke='white' stroke-width='0.5'><title>" + escape(row.label) +
           ": " + what + ", " + timeText(b.begin) + " to " + timeText(b.end) +
           "</title></rect>\n";
      // The micro-batch inside the box when it fits.
      if (b.microBatch >= 0 && w >= 16 && b.kind != "receive")
        s += "<text class='box-label' x='" + format("%.1f", x + w / 2) +
             "' y='" + format("%.1f", y + kBoxHeight / 2 + 4) +
             "' text-anchor='middle' fill='white' pointer-events='none'>" +
             std::to_string(b.microBatch) + "</text>\n";
    }
  }
  // Legend: the kinds drawn, in a fixed order.
  double lx = kLeft, ly = axisY + 24;
  for (const KindStyle &k : kKinds) {
    if (!drawn.count(k.kind))
      continue;
    std::string label = k.label;
    if (std::string(k.kind) == "backward" && t.recompute)
      label = "backward (after recomputing the forward)";
    s += "<rect class='swatch " + std::string(k.kind) + "' x='" +
         format("%.1f", lx) + "' y='" + format("%.1f", ly - 9) +
         "' width='12' height='12' fill='" + k.color + "'/>\n";
    s += "<text class='legend' x='" + format("%.1f", lx + 16) + "' y='" +
         format("%.1f", ly + 1) + "'>" + escape(label) + "</text>\n";
    lx += 16 + 6.5 * static_cast<double>(label.size()) + 18;
  }
  s += "</svg>\n";
  return s;
}

std::string timelineReportHTML(const std::string &title,
                               const std::string &preformatted,
                               const std::vector<Timeline> &timelines) {
  double axis = 0;
  for (const Timeline &t : timelines)
    axis = std::max(axis, t.seconds);
  std::string page =
      "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>\n<title>" +
      escape(title) +
      "</title>\n<style>body{font-family:sans-serif;margin:20px}"
      "pre{background:#f6f8fa;padding:8px}h2{font-size:15px;margin:18px 0 "
      "4px}</style>\n</head><body>\n<h1>" +
      escape(title) + "</h1>\n<pre>" + escape(preformatted) + "</pre>\n";
  for (const Timeline &t : timelines)
    page += "<h2>" + escape(t.title) + ": " + timeText(t.seconds) + "</h2>\n" +
            timelineSVG(t, axis);
  return page + "</body></html>\n";
}

} // namespace gpipe
