#include "gpipe/runtime/Progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gpipe::runtime {

namespace {

/// Weight of the past in the smoothed loss (about the last ten steps).
constexpr double kSmoothing = 0.9;
constexpr int kBarWidth = 24;

/// A loss in a fixed width, so that the line does not jitter.
std::string lossText(double loss) {
  char text[32];
  double magnitude = std::fabs(loss);
  if (std::isfinite(loss) &&
      (magnitude == 0 || (magnitude >= 1e-3 && magnitude < 1e5)))
    std::snprintf(text, sizeof text, "%9.4f", loss);
  else
    std::snprintf(text, sizeof text, "%9.3g", loss);
  return text;
}

std::string number(const char *format, double value) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

} // namespace

std::string clockTime(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "-:--:--";
  auto total = static_cast<int64_t>(seconds);
  char text[32];
  std::snprintf(
      text, sizeof text, "%lld:%02d:%02d", static_cast<long long>(total / 3600),
      static_cast<int>(total / 60 % 60), static_cast<int>(total % 60));
  return text;
}

Progress::Progress(std::ostream &out, Config config)
    : out(out), c(std::move(config)) {
  c.steps = std::max<int64_t>(1, c.steps);
  c.stepsPerEpoch = std::max<int64_t>(1, c.stepsPerEpoch);
  c.lineEvery = std::max<int64_t>(1, c.lineEvery);
  // Too narrow for the shortest bar (at its widest, the last step):
  // plain lines.
  if (c.terminal && bar(c.steps - 1, 0, 0).empty())
    c.terminal = false;
  int64_t epochs = (c.steps + c.stepsPerEpoch - 1) / c.stepsPerEpoch;
  out << "training steps " << c.firstStep + 1 << ".." << c.steps << " ("
      << epochs << (epochs == 1 ? " epoch" : " epochs") << " of "
      << c.stepsPerEpoch << " steps, " << c.itemsPerStep << " " << c.unit
      << " a step)\n"
      << std::flush;
}

double Progress::smoothedLoss() const {
  return weight > 0 ? average / weight : 0;
}

double Progress::rate(double seconds) const {
  // Counted from the end of this run's first step: a resumed run's earlier
  // steps took no time here, and the first one (caches, first touches of
  // memory) is slower than the rest.
  if (done >= 2 && seconds > firstSeconds)
    return double(done - 1) * c.itemsPerStep / (seconds - firstSeconds);
  return seconds > 0 ? double(done) * c.itemsPerStep / seconds : 0;
}

double Progress::remainingSeconds(int64_t step, double seconds) const {
  double perStep = rate(seconds) > 0 ? c.itemsPerStep / rate(seconds) : 0;
  return perStep * double(c.steps - step - 1);
}

void Progress::update(int64_t step, double loss, double lr, double seconds) {
  done = step + 1 - c.firstStep;
  if (done == 1)
    firstSeconds = seconds;
  if (std::isfinite(loss)) {
    average = kSmoothing * average + (1 - kSmoothing) * loss;
    weight = kSmoothing * weight + (1 - kSmoothing);
  }
  lastStep = step;
  lastLr = lr;
  lastSeconds = seconds;
  bool last = step + 1 == c.steps;
  if (c.terminal) {
    // Redrawn ten times a second at most; the last step always.
    if (last || done == 1 || seconds - lastLine >= 0.1)
      draw(step, lr, seconds);
    if (last)
      finish();
    return;
  }
  // Plain lines: the first step (it tells how long a step takes), then
  // every lineEvery steps, and after a quiet spell.
  if (last || done == 1 || (step + 1) % c.lineEvery == 0 ||
      seconds - lastLine >= c.maxQuietSeconds) {
    out << line(step, loss, lr, seconds) << "\n" << std::flush;
    lastLine = seconds;
  }
}

void Progress::draw(int64_t step, double lr, double seconds) {
  out << "\r" << bar(step, lr, seconds) << "\x1b[K" << std::flush;
  barOpen = true;
  drawnStep = step;
  lastLine = seconds;
}

void Progress::interrupt() {
  if (barOpen && drawnStep != lastStep)
    draw(lastStep, lastLr, lastSeconds);
  if (barOpen)
    out << "\n";
  barOpen = false;
}

void Progress::finish() {
  interrupt();
  out << std::flush;
}

Progress::Fields Progress::fields(int64_t step, double seconds) const {
  Fields f;
  f.epochs = (c.steps + c.stepsPerEpoch - 1) / c.stepsPerEpoch;
  f.epoch = std::min(f.epochs, step / c.stepsPerEpoch + 1);
  f.fraction = double(step + 1) / c.steps;
  f.eta = remainingSeconds(step, seconds);
  f.items =
      std::to_string(static_cast<int64_t>(rate(seconds))) + " " + c.unit + "/s";
  f.stepText = std::to_string(step + 1) + "/" + std::to_string(c.steps);
  f.epochText =
      "epoch " + std::to_string(f.epoch) + "/" + std::to_string(f.epochs);
  return f;
}

std::string Progress::bar(int64_t step, double lr, double seconds) const {
  Fields f = fields(step, seconds);
  std::string percent = number("%3.0f%%", 100 * f.fraction);
  std::string lossField = "loss" + lossText(smoothedLoss());
  std::string clocks = clockTime(seconds) + "<" + clockTime(f.eta);
  auto full = [&](int width, bool withLr) {
    int filled = static_cast<int>(f.fraction * width);
    return f.epochText + " [" + std::string(filled, '#') +
           std::string(width - filled, '-') + "] " + percent + "  " +
           f.stepText + "  " + clocks + "  " + lossField +
           (withLr ? "  lr " + number("%.3g", lr) : std::string()) + "  " +
           f.items;
  };
  // From the widest to the narrowest: the first that fits is drawn. A line
  // as wide as the terminal would wrap on some terminals: one column spare.
  int room = std::max(c.columns, 1);
  auto fits = [&](const std::string &text) {
    return static_cast<int>(text.size()) < room;
  };
  for (auto [width, withLr] :
       {std::pair{kBarWidth, true}, std::pair{kBarWidth, false},
        std::pair{10, false}})
    if (std::string text = full(width, withLr); fits(text))
      return text;
  std::string eta = " ETA " + clockTime(f.eta) + " ";
  for (const std::string &text :
       {f.epochText + " " + percent + " " + f.stepText + eta + lossField + " " +
            f.items,
        f.stepText + eta + lossField, f.stepText + " " + lossField})
    if (fits(text))
      return text;
  return "";
}

std::string Progress::line(int64_t step, double loss, double lr,
                           double seconds) const {
  Fields f = fields(step, seconds);
  std::string text = "step " + f.stepText + " (" +
                     number("%.0f%%", 100 * f.fraction) + ")  " + f.epochText +
                     "  loss " + number("%.6g", loss);
  if (done > 1)
    text += " (smoothed " + number("%.6g", smoothedLoss()) + ")";
  return text + "  lr " + number("%.3g", lr) + "  " + f.items + "  elapsed " +
         clockTime(seconds) + "  ETA " + clockTime(f.eta);
}

} // namespace gpipe::runtime
