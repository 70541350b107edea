// The schedule interpreter of one training stage: runs its device's
// instruction stream from the bundle's schedule, with the stage's code,
// its stash and a Transport to its neighbours, wired as the manifest says.
#ifndef GPIPE_RUNTIME_STREAMRUNNER_H
#define GPIPE_RUNTIME_STREAMRUNNER_H

#include "Reducer.h"
#include "Transport.h"

#include "DeviceTurn.h"
#include "StageExecutor.h"
#include "gpipe/runtime/Bundle.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// What one step gives every stage: the batch, the step's number and
/// random seed, and the hyper-parameters of its optimizer step.
struct StepContext {
  const std::map<std::string, HostTensor> *batch = nullptr;
  int64_t step = 0;
  uint64_t seed = 0;
  int64_t microBatches = 1;
  /// Data-parallel replicas of the pipeline (their gradients are summed).
  int64_t replicas = 1;
  /// Value of each Hyper, indexed by its enum value.
  std::vector<float> hyper;
};

class StreamRunner {
public:
  /// `spec` and `stream` belong to a checked training bundle; the executor
  /// runs the stage's code. With data parallelism, `reducer` sums the
  /// step's gradients over the stage's replicas (null: one replica).
  StreamRunner(const StageSpec &spec, const StreamSpec &stream,
               std::unique_ptr<StageExecutor> executor, Transport &transport,
               Reducer *reducer = nullptr);

  /// Runs the stream's instructions once (one training step). On an error
  /// the stage's per-step state is dropped; the caller aborts the transport.
  void runStep(const StepContext &context);
  /// Drops what a failed step left (stash slots, received messages).
  void clearStep();

  /// The sum of the micro-batch losses of the last step (last stage).
  double lossSum() const { return lossSum_; }

  /// The forward of one micro-batch for evaluation: its data inputs from
  /// `microBatch`, its received activations straight from the previous
  /// stage's forward arena.
  void evaluate(const std::map<std::string, HostTensor> &microBatch,
                const StreamRunner *previous);

  /// Evaluation across ranks: the stage input of one micro-batch from the
  /// previous stage's rank, and the stage output to the next one's.
  void receiveForEvaluation();
  void sendForEvaluation();

  StageExecutor &executor() { return *exec; }
  const StageExecutor &executor() const { return *exec; }
  const StageSpec &spec() const { return spec_; }
  const PhaseSpec &forwardPhase() const { return *fwdSpec; }
  size_t forwardIndex() const { return fwd; }
  size_t backwardIndex() const { return bwd; }
  /// A split backward's weight part (phase "backward_weight"), or
  /// kNoPhase; its input part is backwardIndex().
  static constexpr size_t kNoPhase = static_cast<size_t>(-1);
  size_t weightIndex() const { return wgt; }
  /// The data inputs its forward reads from the batch.
  const std::vector<const TensorSlot *> &dataInputs() const { return dataIn; }
  /// Bytes of its stash slots.
  int64_t stashAllocated() const {
    return spec_.wiring.stashBytes * static_cast<int64_t>(stashSlots.size());
  }

  /// Timing of the steps run so far (forward, backward and optimizer).
  double busySeconds() const { return busy; }
  /// Of busySeconds, the optimizer steps'.
  double optimizerSeconds() const { return optimizerBusy; }
  /// Of the replica sums: the time from the first start to the end of
  /// the wait at the optimizer step, and the part of it spent waiting.
  double replicaSumSeconds() const { return sumSpan; }
  double replicaWaitSeconds() const { return sumWait; }
  struct TraceEvent {
    Instruction instr;
    /// The traced step it belongs to (0 for the first traced step).
    int64_t step = 0;
    /// Bytes a transfer moves (0 for compute).
    int64_t bytes = 0;
    double begin, end;
  };
  /// Where a stage's steps went besides its kernels and generated loops,
  /// in seconds summed over the steps since setProfiling(true) (gpipe-run
  /// --profile-ops). [0] is the forwards' part, [1] the backwards'.
  struct Breakdown {
    double steps = 0;          // runStep, whole
    double phaseRuns[2] = {};  // the stage code's runs, kernels and loops in
    double dataInputs[2] = {}; // batch inputs, the loss gradient's seed
    double stash[2] = {};      // kept values into the stash, and back
    double messages[2] = {};   // activations and gradients to and from
                               // messages
    double waits[2] = {};      // receives waiting for their message
    double turnWaits = 0;      // waits for the device's turn (an interleaved
                               // schedule: its other stages computing)
    double gradientSums = 0;   // the micro-batches' gradients added up
    double exchange = 0;  // of the optimizer steps: the gradients summed with
                          // the other replicas and the stages that share a
                          // weight (their waits included)
    double optimizer = 0; // optimizer steps, whole
  };
  /// Starts (restarts) summing the breakdown.
  void setProfiling(bool on) {
    profiling = on;
    breakdown_ = {};
  }
  const Breakdown &breakdown() const { return breakdown_; }

  /// Records every instruction and kernel while set.
  void setTracing(bool on) { tracing = on; }
  /// The order of the device this stage shares with others (an
  /// interleaved schedule; null: the device is its own).
  void setDeviceTurn(DeviceTurn *turn) { deviceTurn = turn; }
  const std::vector<TraceEvent> &trace() const { return traceEvents; }
  const std::vector<StageExecutor::KernelEvent> &kernelTrace() const {
    return kernels;
  }

private:
  void run(const Instruction &instr, const StepContext &context);
  void forward(int64_t mb, const StepContext &context);
  /// A whole backward, or, where the stage splits them, its input part:
  /// the stash stays for the weight part, with what it keeps of the input
  /// part's.
  void backward(int64_t mb, const StepContext &context);
  /// A split backward's weight part: its inputs from the stash slot, the
  /// batch and the loss gradient's seed; its gradients summed.
  void backwardWeight(int64_t mb, const StepContext &context);
  /// Adds micro-batch's parameter gradients (outputs of `phase`) where the
  /// optimizer reads them; starts the replica sums after the last.
  void sumGradients(size_t phase, const StepContext &context);
  /// The loss gradient's seed: 1 / (micro-batches x replicas).
  void writeLossSeed(size_t phase, const TensorSlot &slot,
                     const StepContext &context);
  void optimizerStep(const StepContext &context);
  /// Adds up, on every stage that shares a weight, the step's gradients of
  /// that weight from all of them (in stage order, so that every copy
  /// takes the same optimizer step).
  void sumTiedGradients();
  /// Starts summing the step's gradients over the replicas, bucket by
  /// bucket (after the last backward).
  void startReplicaSums();
  /// Waits for those sums and puts them where the optimizer reads them;
  /// averages the running statistics (buffers) over the replicas.
  void finishReplicaSums(const StepContext &context);
  void loadStash(int64_t mb, const StepContext &context);
  /// Copies a data input the backward reads again from the step's batch.
  void loadFromBatch(const WiringSpec::Carried &c, int64_t mb,
                     const StepContext &context);
  /// Micro-batch `mb`'s rows of forward input `forwardInput` from the
  /// step's batch into `in` of `phase`.
  void loadFromBatch(size_t phase, const TensorSlot &in, size_t forwardInput,
                     int64_t mb, const StepContext &context);
  /// A message of `layout`'s tensors of `phase`'s outputs in `arena`.
  Transport::Message fill(const MessageLayout &layout, const PhaseSpec &phase,
                          const char *arena, const MessageKey &key);
  void send(const MessageLayout &layout, const PhaseSpec &phase,
            const char *arena, const MessageKey &key);
  /// Fills the activations (gradients) micro-batch `mb` sends, if the
  /// stream sends them, as its forward (backward) ends: the send posts it
  /// later, and the instructions in between may reuse the arena.
  void fillOutgoing(MessageKind kind, int64_t mb);
  /// Posts the message a send instruction sends (filled before).
  void postOutgoing(const Instruction &instr);
  void receive(const MessageLayout &layout, const PhaseSpec &phase, char *arena,
               const MessageKey &key, const char *what);
  MessageKey key(MessageKind kind, int64_t peer, int64_t mb,
                 bool sending) const;
  /// The message a send or receive instruction of this stage moves.
  MessageKey transferKey(const Instruction &instr) const;
  /// The received messages of one kind, by micro-batch.
  std::map<int64_t, Transport::Message> &receivedOf(MessageKind kind) {
    return kind == MessageKind::Activation ? received : gradReceived;
  }

  const StageSpec &spec_;
  const StreamSpec &stream;
  std::unique_ptr<StageExecutor> exec;
  Transport &transport;
  const WiringSpec &wiring;
  size_t fwd = 0, bwd = 0, opt = 0, wgt = kNoPhase;
  const PhaseSpec *fwdSpec, *bwdSpec, *optSpec, *wgtSpec = nullptr;
  std::vector<const TensorSlot *> dataIn;

  Reducer *reducer;
  /// Gradient buckets of the replica sums: a host buffer and the trained
  /// tensors (indices into wiring.trained) it packs, in order.
  struct Bucket {
    std::vector<float> data;
    std::vector<size_t> trained;
  };
  std::vector<Bucket> buckets;
  /// The float running statistics (buffers) averaged over the replicas,
  /// each with its host copy.
  std::vector<std::pair<const TensorSlot *, std::vector<float>>> replicaStats;
  double sumStart = 0, sumSpan = 0, sumWait = 0;

  /// The host copy of each tied gradient (by tie), then its sum.
  std::map<int64_t, std::vector<float>> tiedSums;
  std::vector<DeviceBuffer> stashSlots; // device memory
  std::vector<int> freeSlots;
  std::map<int64_t, int> slotOf;
  /// The micro-batches whose forward keeps its values in the backward's
  /// arena directly (see the constructor).
  std::set<int64_t> directlyCarried;

  /// Every message the stream sends, by (kind, micro-batch).
  std::map<std::pair<MessageKind, int64_t>, MessageKey> sendKeys;

  // Per step.
  std::map<int64_t, Transport::Message> received, gradReceived;
  /// Filled messages waiting for their send instruction.
  std::map<std::pair<MessageKind, int64_t>, Transport::Message> outgoing;
  std::set<int64_t> restored;
  int64_t backwards = 0;
  /// By trained tensor: whether the product computing its gradient writes
  /// it into the step's sum itself (StageExecutor::retarget), the first
  /// backward over it and the others adding into it: sumGradients() then
  /// leaves it alone.
  std::vector<bool> summedByKernel;
  double lossSum_ = 0;

  double busy = 0, optimizerBusy = 0;
  bool profiling = false;
  Breakdown breakdown_;
  /// A timed part of the step: its seconds into `field` while profiling
  /// and, given a `name` (the runtime's own work: stash copies, messages,
  /// data inputs, gradient sums), a trace event of category "runtime"
  /// while tracing; no clock read otherwise.
  class Part {
  public:
    Part(StreamRunner &runner, double &field,
         const std::string *name = nullptr);
    ~Part();
    Part(const Part &) = delete;
    Part &operator=(const Part &) = delete;

  private:
    StreamRunner &runner;
    double &field;
    const std::string *name;
    bool timed;
    double begin = 0;
  };
  bool tracing = false;
  DeviceTurn *deviceTurn = nullptr;
  std::vector<TraceEvent> traceEvents;
  int64_t tracedSteps = 0;
  std::vector<StageExecutor::KernelEvent> kernels;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_STREAMRUNNER_H
