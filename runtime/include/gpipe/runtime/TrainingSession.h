// Training with a bundle compiled with --mode=train: micro-batches,
// gradient accumulation and one optimizer step per mini-batch.
#ifndef GPIPE_RUNTIME_TRAININGSESSION_H
#define GPIPE_RUNTIME_TRAININGSESSION_H

#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/StageExecutor.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpipe::runtime {

class TrainingSession {
public:
  /// Hyper-parameters the compiled optimizer reads each step.
  enum class Hyper {
    LR,
    WeightDecay,
    Momentum,
    Beta1,
    Beta2,
    Eps,
    StepSize,
    BiasCorrection2
  };

  explicit TrainingSession(const std::string &bundlePath);

  const Bundle &bundle() const { return bundle_; }
  /// Samples per optimizer step.
  int64_t batchSize() const { return bundle_.training.batchSize; }
  /// The graph inputs a batch must provide (labels included, loss_grad not).
  const std::vector<const TensorSlot *> &dataInputs() const {
    return dataInputs_;
  }

  /// One synchronous step: the batch (batchSize() rows of every data input)
  /// runs as M micro-batches, each seeding its backward with 1/M, their
  /// gradients summed, then the optimizer updates the parameters once.
  /// Returns the mean loss over the batch.
  double step(const std::map<std::string, HostTensor> &batch);

  void setLearningRate(double value) { lr_ = value; }
  /// Overrides a compiled optimizer hyper-parameter: "momentum",
  /// "weight_decay", "beta1", "beta2" or "eps". Throws InputError for a
  /// name this bundle's optimizer does not use or a value out of range.
  void setHyperParameter(const std::string &name, double value);

  /// Forward only (no update) on one micro-batch of data inputs (compiled
  /// micro-batch rows): returns the model's first output (the logits).
  HostTensor evaluate(const std::map<std::string, HostTensor> &microBatch);
  /// Rows of one micro-batch.
  int64_t microBatchSize() const {
    return batchSize() / bundle_.training.microBatches;
  }
  double learningRate() const { return lr_; }

  /// Classes of the model's [N, C] output (0 if it is not 2-D).
  int64_t classCount() const {
    return modelOutput && modelOutput->shape.size() == 2 ? modelOutput->shape[1]
                                                         : 0;
  }

  /// Seeds dropout: micro-batch k of step s draws from (seed, s, k).
  void setRandomSeed(uint64_t seed) { randomSeed = seed; }
  /// Bytes kept between the forward and the backward of one micro-batch
  /// (the activations, or nothing beyond the inputs with --recompute).
  int64_t stashBytes() const { return stashBytes_; }
  /// Optimizer steps taken so far.
  int64_t stepsTaken() const { return steps; }

  /// Writes parameters, optimizer state and the step count to `path`
  /// atomically (a temporary file renamed into place). `extra` is stored
  /// as is (the trainer's own state, e.g. its shuffling seed).
  void saveCheckpoint(const std::string &path, uint64_t extra) const;
  /// Restores a checkpoint of this bundle; returns its `extra`. Throws
  /// BundleError if the file is damaged or belongs to another model.
  uint64_t loadCheckpoint(const std::string &path);

  /// The model's tensors by name: trainable parameters and the state ops
  /// update (BatchNorm running statistics).
  std::map<std::string, HostTensor> parameters() const;

private:
  void optimizerStep();
  std::vector<const TensorSlot *> modelState() const;

  Bundle bundle_;
  std::unique_ptr<StageExecutor> stage;
  const TensorSlot *loss = nullptr, *lossGrad = nullptr, *modelOutput = nullptr;
  std::vector<const TensorSlot *> dataInputs_;
  size_t forwardPhase = 0, backwardPhase = 0;
  /// A backward input: kept from the forward (at stashOffset of a
  /// micro-batch's stash), or a data input (kept == null).
  struct Carried {
    const TensorSlot *input;
    const TensorSlot *kept;
    int64_t stashOffset;
  };
  std::vector<Carried> carried;
  int64_t stashBytes_ = 0;
  std::vector<std::vector<char>> stash;
  /// For each trainable parameter: its slot, its gradient (a backward
  /// output) and the optimizer input where the micro-batches' gradients
  /// are summed.
  struct Trained {
    const TensorSlot *param, *grad, *sum;
  };
  std::vector<Trained> trained;
  size_t optimizerPhase = 0;
  /// The optimizer phase's hyper-parameter inputs, resolved at load.
  std::vector<std::pair<Hyper, const TensorSlot *>> hyper;
  double lr_ = 0;
  int64_t steps = 0;
  uint64_t randomSeed = 0;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRAININGSESSION_H
