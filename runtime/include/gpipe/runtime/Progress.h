// The trainer's progress display: a bar redrawn in place on a terminal,
// plain periodic lines otherwise. Times are passed in (seconds since the
// run began), so that what it prints depends on its inputs only.
#ifndef GPIPE_RUNTIME_PROGRESS_H
#define GPIPE_RUNTIME_PROGRESS_H

#include <cstdint>
#include <ostream>
#include <string>

namespace gpipe::runtime {

/// "1:02:03" (hours, minutes, seconds; whole seconds).
std::string clockTime(double seconds);

class Progress {
public:
  struct Config {
    /// The steps already taken (a resumed run) and the last step's number.
    int64_t firstStep = 0, steps = 1;
    /// Steps per pass over the data.
    int64_t stepsPerEpoch = 1;
    /// Samples (or tokens) one step consumes, and their name.
    int64_t itemsPerStep = 1;
    std::string unit = "samples";
    /// A bar redrawn in place (a terminal) or plain lines.
    bool terminal = false;
    /// The terminal's width: the bar drops fields to fit in it, and falls
    /// back to plain lines where even the shortest bar does not fit.
    int columns = 80;
    /// Plain lines: one every this many steps (about ten per epoch), and
    /// one at least every `maxQuietSeconds`.
    int64_t lineEvery = 1;
    double maxQuietSeconds = 30;
  };

  /// Prints the line that says what the run will do, at once (a log
  /// file learns within a moment that training started).
  Progress(std::ostream &out, Config config);

  /// Step `step` (0-based) is done with `loss` at `lr`, `seconds` after
  /// the run began.
  void update(int64_t step, double loss, double lr, double seconds);
  /// Ends the bar's line before other output (an evaluation) on a
  /// terminal, first redrawn at the last step updated (the bar is redrawn
  /// ten times a second at most, so it may show an earlier step).
  void interrupt();
  /// Ends the display (the last step's line stays).
  void finish();

  /// The loss averaged over recent steps (exponential, bias-corrected).
  double smoothedLoss() const;
  /// Samples (or tokens) per second since the end of this run's first step
  /// (the first step's own rate until there is a second).
  double rate(double seconds) const;
  /// The time the steps after `step` will take at that rate.
  double remainingSeconds(int64_t step, double seconds) const;

private:
  /// What the bar and the plain line both show of a step.
  struct Fields {
    int64_t epochs = 0, epoch = 0;
    double fraction = 0, eta = 0;
    std::string items, stepText, epochText;
  };
  Fields fields(int64_t step, double seconds) const;
  std::string line(int64_t step, double loss, double lr, double seconds) const;
  /// The widest bar of at most `columns - 1` characters; empty if none.
  std::string bar(int64_t step, double lr, double seconds) const;
  void draw(int64_t step, double lr, double seconds);

  std::ostream &out;
  Config c;
  int64_t done = 0;               // steps taken by this run
  double average = 0, weight = 0; // the smoothed loss: average / weight
  double firstSeconds = 0;        // seconds at the end of the first step
  double lastLine = 0;            // seconds at the last line drawn
  bool barOpen = false;           // a bar line without its newline
  int64_t drawnStep = -1;         // the step the open bar shows
  int64_t lastStep = -1;          // the last step updated, its lr and time
  double lastLr = 0, lastSeconds = 0;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_PROGRESS_H
