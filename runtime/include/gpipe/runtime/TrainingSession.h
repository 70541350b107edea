// Training with a bundle compiled with --mode=train: micro-batches,
// gradient accumulation and one optimizer step per mini-batch.
#ifndef GPIPE_RUNTIME_TRAININGSESSION_H
#define GPIPE_RUNTIME_TRAININGSESSION_H

#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/InferenceSession.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpipe::runtime {

struct TraceTrack;

class ProcessGroup;
class StreamRunner;
class Transport;
class DeviceTurn;
class DeviceWorker;
class DeviceBackend;

/// Creates the backend of a stage's device ("cpu:0-1").
using BackendFactory =
    std::function<std::unique_ptr<DeviceBackend>(const std::string &device)>;

class TrainingSession {
public:
  explicit TrainingSession(const std::string &bundlePath);
  /// Stages exchange their messages through `transport` (tests record the
  /// traffic); null: channels in this process. Stages run on the backends
  /// `backends` creates (tests record the calls); null: the runtime's.
  TrainingSession(const std::string &bundlePath,
                  std::unique_ptr<Transport> transport,
                  BackendFactory backends = nullptr,
                  ProcessGroup *group = nullptr, bool allStagesHere = false);
  /// The stages of this rank of an mpirun job (`group` outlives the
  /// session); the other ranks run the others (docs/distributed.md). With
  /// allStagesHere (and no group), a bundle whose stages name several
  /// ranks runs them all in this process, as threads.
  TrainingSession(const std::string &bundlePath, ProcessGroup &group);
  /// Every stage in this process (as threads), also those of a bundle
  /// compiled for several ranks when allStagesHere.
  TrainingSession(const std::string &bundlePath, bool allStagesHere);

  /// The rank whose stages this session runs, and the bundle's ranks.
  int64_t rank() const { return worldRank; }
  int64_t rankCount() const { return bundle_.rankCount(); }
  /// The data-parallel replica this rank belongs to, and how many there
  /// are: replica r trains on rows [r * batchSize(), (r + 1) * batchSize())
  /// of each global batch.
  int64_t replica() const { return replica_; }
  int64_t replicas() const { return bundle_.training.dataParallel; }

  const Bundle &bundle() const { return bundle_; }
  /// Samples per optimizer step.
  int64_t batchSize() const { return bundle_.training.batchSize; }
  /// The graph inputs a batch must provide (labels included, loss_grad not),
  /// of every stage (also those of other ranks).
  const std::vector<const TensorSlot *> &dataInputs() const {
    return dataInputs_;
  }
  /// The data inputs this rank's stages read (every one in one process):
  /// the first stage's inputs, the last stage's labels. A batch passed to
  /// step() or evaluate() needs these only.
  const std::vector<const TensorSlot *> &localDataInputs() const {
    return localDataInputs_;
  }

  /// One synchronous step: the batch (batchSize() rows of every data input)
  /// runs as M micro-batches, each seeding its backward with 1/M, their
  /// gradients summed, then the optimizer updates the parameters once.
  /// With D data-parallel replicas each rank passes its replica's rows;
  /// the seed is 1/(M D), the gradients are summed over the replicas and
  /// the mean loss of the global batch is returned on every rank.
  /// Each stage runs its device's instruction stream from the bundle's
  /// schedule on its own thread, the stages exchanging activations and
  /// gradients. Returns the mean loss over the batch.
  double step(const std::map<std::string, HostTensor> &batch);

  /// The cores of this process's first stage on CPU cores (empty: none):
  /// where the thread that calls step() waits best. A step's end wakes
  /// that thread; on a core of its own, idle through the step, the wake-up
  /// crosses cores (a 0.4 ms MLP step on one core: 14-19% of it idle
  /// between steps, 3% with the caller on the stage's core).
  std::vector<int> driverCores() const;

  void setLearningRate(double value) { lr_ = value; }
  /// Overrides a compiled optimizer hyper-parameter: "momentum",
  /// "weight_decay", "beta1", "beta2" or "eps". Throws InputError for a
  /// name this bundle's optimizer does not use or a value out of range.
  void setHyperParameter(const std::string &name, double value);

  /// Forward only (no update) on one micro-batch of data inputs (compiled
  /// micro-batch rows): returns the model's first output (the logits).
  /// Across ranks every rank calls it; the last stage's rank gets the
  /// logits, the others an empty tensor.
  HostTensor evaluate(const std::map<std::string, HostTensor> &microBatch);
  /// `value` as the last stage's rank has it, on every rank.
  double fromLastStage(double value);
  /// `value` as rank 0 has it, on every rank (itself in one process).
  double fromRankZero(double value);
  /// What rank 0 found doubtful in the placement when the session started
  /// (ranks of one host pinning the same cores); empty on other ranks.
  const std::vector<std::string> &placementWarnings() const {
    return warnings_;
  }
  /// Rows of one micro-batch.
  int64_t microBatchSize() const {
    return batchSize() / bundle_.training.microBatches;
  }
  /// Whether `t` holds `samples` samples of data input `slot`: its
  /// dimensions after the first are the slot's; or, for the labels of a
  /// model whose logits hold several rows per sample (per-token logits
  /// viewed [B*T, V] by the model), [samples, ...] with as many labels
  /// per sample as the slot's rows per sample.
  bool holdsSamples(const TensorSlot &slot, const HostTensor &t,
                    int64_t samples) const;
  double learningRate() const { return lr_; }

  /// Classes of the model's [N, C] output (0 if it is not 2-D).
  int64_t classCount() const;

  /// Seeds dropout: micro-batch k of step s draws from (seed, s, k).
  void setRandomSeed(uint64_t seed) { randomSeed = seed; }
  /// Optimizer steps taken so far.
  int64_t stepsTaken() const { return steps; }

  /// Writes parameters, optimizer state and the step count to the
  /// directory `dir` atomically. `extra` is stored as is (the trainer's own
  /// state, e.g. its shuffling seed). In one process: dir/checkpoint.bin (a
  /// temporary file renamed into place). Across ranks every rank calls it:
  /// each writes its stages' part, dir/parts/step-S.rank-R.bin; when every
  /// rank has, rank 0 commits dir/checkpoint.json naming step S (renamed
  /// into place), then each rank removes its older parts. A rank killed at
  /// any moment leaves the previous checkpoint current.
  void saveCheckpoint(const std::string &dir, uint64_t extra) const;
  /// Restores the checkpoint current in `dir` (every rank calls it);
  /// returns its `extra`, or nothing when `dir` holds none. Throws
  /// BundleError if a file is damaged, belongs to another model or bundle,
  /// or a rank's part is of another step than the commit names.
  std::optional<uint64_t> loadCheckpoint(const std::string &dir);

  /// The model's tensors by name: trainable parameters and the state ops
  /// update (BatchNorm running statistics). Across ranks every rank calls
  /// it (a gather): rank 0 gets them all, the others nothing.
  std::map<std::string, HostTensor> parameters() const;

  /// Records every instruction and kernel of the following steps for
  /// writeTrace().
  void enableTrace() { tracing = true; }
  /// Writes the recorded steps as a Chrome / Perfetto trace (JSON): one
  /// track per device with its instructions and kernels. Across ranks
  /// every rank calls it: rank 0 writes one file with every rank's tracks
  /// (their clocks aligned at a barrier before the first traced step).
  void writeTrace(const std::string &path) const;
  /// Writes an HTML page (`title`, then `text` preformatted) with the
  /// compiler's predicted step beside a measured one: of the recorded
  /// steps, the one of median length. Across ranks as writeTrace.
  void writeReport(const std::string &path, const std::string &title,
                   const std::string &text) const;

  /// Times every kernel of the following steps (restarting the count) for
  /// opProfile().
  void enableOpProfile();
  /// Per model op (ONNX node) with kernels: mean seconds per micro-batch of
  /// its forward kernels and of its backward kernels, over the steps since
  /// enableOpProfile(). The cost table gpipe-opt --cost-table reads. The
  /// rest of each stage's steps follows as rows "(runtime) stage K: part"
  /// (StageStats::profiledParts, per micro-batch as the ops): the table
  /// adds up to the stages' steps.
  std::map<std::string, std::pair<double, double>> opProfile() const;

  /// What the steps so far measured, for the end-of-run summary (of this
  /// rank's stages).
  struct StageStats {
    int64_t index = 0, rank = 0;
    std::string device;
    double busySeconds = 0;      // forward, backward and optimizer work
    double optimizerSeconds = 0; // of which the optimizer steps
    /// Data parallelism: from the start of the gradient sums to their end,
    /// and the part of it the optimizer step waited.
    double allReduceSeconds = 0, allReduceWaitSeconds = 0;
    int64_t allocatedBytes = 0;
    int64_t predictedPeakBytes = 0;
    /// Since enableOpProfile(): where the stage's steps went, part by part
    /// (kernels, generated loops, the stage code between them, stash
    /// copies, ..., and what none of them timed), seconds per step, the
    /// forwards' and the backwards' share; empty when not profiled.
    struct Part {
      std::string name;
      double forward = 0, backward = 0;
    };
    std::vector<Part> profiledParts;
    double profiledStepSeconds = 0;
  };
  struct Stats {
    int64_t steps = 0;
    double stepSeconds = 0; // wall time of all steps
    /// The median step of the last 1000 (the steady pace: one step the
    /// machine slowed, a first step that touches memory first, moves a
    /// mean of a few steps of a millisecond).
    double medianStepSeconds = 0;
    int64_t medianSteps = 0; // the steps it is the median of
    /// The median over the same steps of each step's idle share of this
    /// rank's devices: the schedule's bubble at the steady pace (a step in
    /// which the machine slowed one core leaves the other waiting, which
    /// is the machine's and not the schedule's).
    double medianBubble = 0;
    std::vector<StageStats> stages;
    double predictedStepSeconds = 0, predictedBubble = 0;
    /// 1 - busy / (K * wall): the devices' idle share.
    double bubble() const;
  };
  Stats stats() const;

  /// A process's memory part by part: its peak resident bytes so far; its
  /// stages' memory plan (the compiler's predicted peaks: arenas,
  /// parameters, stash, messages, tied gradients' host copies);
  /// what their devices' kernels hold beside it; the data it holds; and
  /// what it held before loading the stages.
  struct MemoryAccount {
    int64_t rank = 0, peak = 0, plan = 0, kernels = 0, data = 0, start = 0;
    /// What none of the parts names (threads' stacks, libraries' code and
    /// caches, the allocator's free lists).
    int64_t other() const { return peak - plan - kernels - data - start; }
  };
  /// This process's account (`dataBytes`: the data it holds); in a job of
  /// several ranks, a collective that every rank calls: rank 0 gets every
  /// rank's, in rank order, the others their own.
  std::vector<MemoryAccount> memoryAccounts(int64_t dataBytes) const;

  ~TrainingSession();

private:
  struct Stage;
  /// Every tensor that changes, per stage, by its manifest kind: weights,
  /// buffers (BatchNorm's running statistics) and optimizer state; not the
  /// constants the compiler moved into the blobs.
  std::vector<std::pair<const Stage *, const TensorSlot *>> modelState() const;
  /// Identifies the bundle's parameters in checkpoints.
  uint32_t modelChecksum() const;

  /// Whether this session is one rank of several (its stages talk to other
  /// processes).
  bool acrossRanks() const { return group && bundle_.rankCount() > 1; }
  /// Gathers every rank's host and pinned cores to rank 0, which keeps a
  /// warning per set of ranks of one host pinning the same cores.
  void findSharedCores(const std::vector<std::string> &localDevices);
  /// This rank's part of a checkpoint of step `step` in `dir`.
  std::string checkpointPart(const std::string &dir, int64_t step) const;
  /// Writes (reads) this process's stages' state as `path`.
  void writeState(const std::string &path, uint64_t extra) const;
  uint64_t readState(const std::string &path);
  /// parameters() of this rank's stages.
  std::map<std::string, HostTensor> localParameters() const;

  Bundle bundle_;
  /// The process's resident bytes before the stages were loaded.
  int64_t startResident = 0;
  ProcessGroup *group = nullptr;
  /// This process's rank in the job, its replica and its rank within the
  /// replica (the stages' "rank").
  int64_t worldRank = 0, replica_ = 0, localRank = 0;
  bool ownsLastStage = true;
  /// This rank's stages.
  std::vector<std::unique_ptr<Stage>> stages;
  std::unique_ptr<Transport> transport;
  /// The order of each device its stages share (an interleaved schedule:
  /// StreamSpec::deviceGroup).
  std::map<int64_t, std::unique_ptr<DeviceTurn>> deviceTurns;
  std::vector<const TensorSlot *> dataInputs_, localDataInputs_;
  std::vector<std::string> warnings_;
  const TensorSlot *modelOutput = nullptr;
  double lr_ = 0;
  int64_t steps = 0;
  uint64_t randomSeed = 0;
  bool tracing = false;
  /// Every rank's recorded tracks on rank 0 (times from the shared
  /// origin); none on the other ranks.
  std::vector<TraceTrack> collectTrace() const;
  double traceOrigin = 0;
  int64_t statSteps = 0;
  int64_t profileSteps = 0;
  double statSeconds = 0;
  /// The last steps' wall times (at most 1000, oldest overwritten).
  std::vector<double> recentSteps;
  /// Each of those steps' idle share of this rank's devices.
  std::vector<double> recentIdle;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRAININGSESSION_H
