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
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpipe::runtime {

struct TrainerOptions {
  std::string data, evalData, lossLog, saveParams, checkpointDir, saveOnnx;
  /// The trained model as its training graph (BatchNorm, Dropout in
  /// training mode).
  std::string saveOnnxTraining;
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
  /// The terminal's width in columns, which the bar fits in.
  int columns = 80;
  /// Called after every step with its index (from 1) and mean loss; what
  /// it throws ends the training (a Python caller's KeyboardInterrupt).
  std::function<void(int64_t step, double loss)> onStep;
};

/// The learning rate of `step` (0-based) of `steps` from `base`: linear
/// warm-up over the first warmupSteps, then constant, step decay or a cosine
/// down to 0 at the last step.
double scheduledLearningRate(const TrainerOptions &options, double base,
                             int64_t step, int64_t steps);

/// A data set: arrays by model input name and "labels", samples along the
/// first axis (float32 inputs; int32 or int64 labels and token ids).
struct TrainingData {
  /// Names the data in messages (its file, or where the arrays came from).
  std::string source;
  std::map<std::string, HostTensor> arrays;
  /// Every array the source holds, listed when one the model needs is
  /// missing (empty: the keys of `arrays`).
  std::vector<std::string> names;
};

/// The data set at `path` as --data reads it: an .npz (arrays by input name
/// and 'labels'; an only array of another name feeds a model of one
/// input), a directory of IDX files (Fashion-MNIST layout; `split` train or
/// t10k) or any other file as plain text for a byte-level language model.
/// Only the arrays this rank's stages read are kept.
TrainingData loadTrainingData(const std::string &path, const std::string &split,
                              TrainingSession &session);

/// Trains `session` as `options` say on the data of options.data (and
/// options.evalData), printing progress to `out`. Throws InputError (bad
/// options or data), BundleError and std::runtime_error.
void runTrainer(TrainingSession &session, const TrainerOptions &options,
                std::ostream &out);
/// The same on data sets in memory (options.data and evalData unused):
/// given the same arrays, the same steps as from a file, to the last bit.
void runTrainer(TrainingSession &session, const TrainerOptions &options,
                std::ostream &out, TrainingData train,
                std::optional<TrainingData> eval);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRAINER_H
