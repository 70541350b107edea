// The training loop of gpipe-run, as a library: the data set and its
// order, learning-rate schedules, the loss log, checkpoint cadence and
// resume, progress lines, evaluation, and the end-of-run outputs (summary,
// op profile, trace, trained model and parameters). gpipe-run parses its
// flags into TrainerOptions and calls runTrainer; a launcher of several
// processes calls the same on each.
#ifndef GPIPE_RUNTIME_TRAINER_H
#define GPIPE_RUNTIME_TRAINER_H

#include "gpipe/runtime/TrainingSession.h"

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

namespace gpipe::runtime {

struct TrainerOptions {
  std::string data, evalData, lossLog, saveParams, checkpointDir, saveOnnx;
  std::string trace, profileOps;
  /// JSON lines, one per step (step, epoch, loss, lr, samples_per_s,
  /// time_s) and one per evaluation (eval_accuracy, eval_samples).
  std::string metrics;
  /// An HTML page with the predicted step beside a measured one.
  std::string report;
  /// constant, step (x lrGamma every lrStepSize steps) or cosine.
  std::string lrSchedule = "constant";
  int64_t warmupSteps = 0, lrStepSize = 0;
  double lrGamma = 0.1;
  int64_t steps = 0, epochs = 0, checkpointEvery = 0;
  bool noShuffle = false, resume = false;
  unsigned seed = 0;
  /// The learning rate; negative: the compiled one.
  double lr = -1;
  /// Optimizer hyper-parameters given on the command line, by name.
  std::map<std::string, double> hyper;
  /// Progress is a bar redrawn in place (a terminal), else about ten lines
  /// per epoch (Progress.h).
  bool terminal = false;
};

/// The learning rate of `step` (0-based) of `steps` from `base`: linear
/// warm-up over the first warmupSteps, then constant, step decay or a cosine
/// down to 0 at the last step.
double scheduledLearningRate(const TrainerOptions &options, double base,
                             int64_t step, int64_t steps);

/// Trains `session` as `options` say, printing progress to `out`. Throws
/// InputError (bad options or data), BundleError and std::runtime_error.
void runTrainer(TrainingSession &session, const TrainerOptions &options,
                std::ostream &out);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRAINER_H
