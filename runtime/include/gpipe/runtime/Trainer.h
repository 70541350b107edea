// The training loop of gpipe-run, as a library: the data set and its
// order, learning-rate schedules, the loss log, checkpoint cadence and
// resume, progress lines, evaluation, and the end-of-run outputs (summary,
// op profile, trace, trained model and parameters). gpipe-run parses its
// flags into TrainerOptions and calls runTrainer; a launcher of several
// processes calls the same on each.
#ifndef GPIPE_RUNTIME_TRAINER_H
#define GPIPE_RUNTIME_TRAINER_H

#include "gpipe/runtime/Npy.h"
#include "gpipe/runtime/TrainingSession.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// What TrainerOptions::onStep sees after each step, and what it may
/// change: `stop` ends the training after this step (the end-of-run
/// outputs are written as after the last step); a new `lr` is the
/// learning rate of every following step (the schedule no longer applies).
struct StepInfo {
  int64_t step = 0; // from 1
  double loss = 0;
  double lr = 0;
  bool stop = false;
};

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
  /// Arrays of the training data's .npz over this many bytes that are
  /// stored uncompressed (numpy.savez) stay in the file and are read a
  /// batch at a time; 0: every such array; negative: none (all loaded).
  int64_t streamDataAbove = int64_t(64) << 20;
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
  /// Called after every step (StepInfo); what it throws ends the training
  /// (a Python caller's KeyboardInterrupt).
  std::function<void(StepInfo &)> onStep;
};

/// One evaluation on the evaluation data (after each epoch).
struct Evaluation {
  int64_t epoch = 0, step = 0, samples = 0;
  double accuracy = 0;
  /// Mean cross-entropy of the logits (NaN for a loss of another kind).
  double loss = 0;
};

/// What a run did: the loss of every step it took, its evaluations and
/// its pace.
struct TrainingResult {
  std::vector<double> losses;
  std::vector<Evaluation> evaluations;
  /// Samples (or tokens) per second after the first step of this run.
  double itemsPerSecond = 0;
  double seconds = 0;
  /// Ended by StepInfo::stop before the steps asked for.
  bool stopped = false;
};

/// Where a run's batches come from: a data set in memory, in an order
/// drawn per pass from the seed (TrainingData), or batches a caller makes
/// (a Python DataLoader).
class BatchSource {
public:
  virtual ~BatchSource() = default;
  /// Names the data in messages.
  virtual std::string describe() const = 0;
  /// Steps in one pass over the data; 0 when not known (then the run
  /// needs a number of steps).
  virtual int64_t stepsPerEpoch() const = 0;
  /// The batch of step `step` (0-based; asked in increasing order from
  /// the run's first step): this rank's data inputs and labels, each with
  /// the compiled batch's rows.
  virtual std::map<std::string, HostTensor> batch(int64_t step) = 0;
  /// Whether its batches are this rank's arrays, widened and with checked
  /// labels already (else the trainer does both for every batch).
  virtual bool checked() const { return false; }
  /// Bytes of data it holds in memory (a data set loaded whole), for the
  /// summary's account of the process's memory.
  virtual int64_t heldBytes() const { return 0; }
};

/// --stream-data's value as TrainerOptions::streamDataAbove: "auto"
/// (arrays over 64 MiB), "always" or "never"; InputError for others.
int64_t streamDataThreshold(const std::string &mode);

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
  /// Arrays left in their file (an .npz's stored members), by name: their
  /// rows are read for each batch, and only that batch is held.
  std::map<std::string, ArrayInFile> inFile;
  /// Every array the source holds, listed when one the model needs is
  /// missing (empty: the keys of `arrays`).
  std::vector<std::string> names;
};

/// Arrays in the model's layout whose samples are not first (a
/// sequence-first model's [T, N] tokens and its labels [T, N]: the bundle's
/// TensorSlot::dataBatchAxis) with the samples moved first, as
/// TrainingSession::step takes them; an array of another shape is an
/// InputError in the model's terms, naming `source`.
void moveSamplesFirst(const TrainingSession &session,
                      std::map<std::string, HostTensor> &arrays,
                      const std::string &source);

/// The data set at `path` as --data reads it: an .npz (arrays by input name
/// and 'labels'; an only array of another name feeds a model of one
/// input), a directory of IDX files (Fashion-MNIST layout; `split` train or
/// t10k) or any other file as plain text for a byte-level language model.
/// Only the arrays this rank's stages read are kept. Arrays of an .npz
/// over `streamAbove` bytes stored uncompressed with their samples first
/// stay in the file (TrainingData::inFile; negative: none).
TrainingData loadTrainingData(const std::string &path, const std::string &split,
                              TrainingSession &session,
                              int64_t streamAbove = -1);

/// Trains `session` as `options` say on the data of options.data (and
/// options.evalData), printing progress to `out`. Throws InputError (bad
/// options or data), BundleError and std::runtime_error.
TrainingResult runTrainer(TrainingSession &session,
                          const TrainerOptions &options, std::ostream &out);
/// The same on data sets in memory (options.data and evalData unused):
/// given the same arrays, the same steps as from a file, to the last bit.
TrainingResult runTrainer(TrainingSession &session,
                          const TrainerOptions &options, std::ostream &out,
                          TrainingData train, std::optional<TrainingData> eval);
/// The same on batches from `train` (options.data, noShuffle unused: the
/// source decides the order).
TrainingResult runTrainer(TrainingSession &session,
                          const TrainerOptions &options, std::ostream &out,
                          BatchSource &train, std::optional<TrainingData> eval);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRAINER_H
