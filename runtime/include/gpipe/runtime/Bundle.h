// Reading and checking a bundle written by gpipe-opt (docs/bundle.md).
#ifndef GPIPE_RUNTIME_BUNDLE_H
#define GPIPE_RUNTIME_BUNDLE_H

#include "gpipe/common/BundleFormat.h"
#include "gpipe/common/Instruction.h"
#include "gpipe/common/KernelKind.h"
#include "gpipe/common/Role.h"
#include "gpipe/common/TimelineReport.h"
#include "gpipe/runtime/Tensor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe::runtime {

using ::gpipe::Hyper;
using ::gpipe::kBundleFormatVersion;
using ::gpipe::Role;

/// A bundle that cannot be used; the message names the bundle and the part.
class BundleError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A tensor placed in a stage's arena or in the parameter blob.
struct TensorSlot {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::string space = "arena"; // "arena" or "params"
  int64_t offset = 0;
  /// A phase output that only one kernel writes and nothing else in the
  /// phase reads (manifest "written_by": the kernel's id; -1: none): the
  /// runtime may have that kernel write it elsewhere.
  int64_t writtenBy = -1;
  /// What a phase's input or output is for (Role::Data elsewhere).
  Role role = Role::Data;
  /// In a parameter blob: what the tensor is (weight, buffer, optimizer
  /// state or constant).
  ParamKind kind = ParamKind::Buffer;
  /// A model output that carries the batch: it is in dimension batchAxis,
  /// batchInner consecutive elements of which belong to one sample (-1: not
  /// known; inputs carry it on axis 0).
  int64_t batchAxis = -1;
  int64_t batchInner = 1;
  /// A model input (labels included): the axis of the samples in the
  /// arrays a user gives, in the model's layout (1 for a sequence-first
  /// [T, B] input); the slot itself holds them first.
  int64_t dataBatchAxis = 0;

  int64_t numElements() const;
  int64_t byteSize() const;
  /// The shape of a user's array of `samples` samples for this input: the
  /// slot's with the samples at dataBatchAxis.
  std::vector<int64_t> dataShape(int64_t samples) const;
  /// Whether `shape` is such an array's for some number of samples.
  bool holdsData(const std::vector<int64_t> &shape) const;
  /// Such an array's type with N samples: "int64[12, N]".
  std::string describeData() const;
};

/// A heavy op the runtime runs with a oneDNN primitive.
struct KernelSpec {
  int64_t id = 0;
  std::string kind; // nn op name: "gemm", "conv", ...
  std::string op;   // the model op (ONNX node) it computes, or ""
  std::map<std::string, std::vector<double>> numbers; // numeric attributes
  std::map<std::string, std::string> strings;         // string attributes
  std::vector<TensorSlot> operands, results;
  /// The kind's entry in the contract (common/KernelKind.h), which the
  /// loader checked this entry against.
  const KernelKind *contract = nullptr;

  /// The operand or result named as in the contract; BundleError if the
  /// entry has no such tensor (an optional operand left out).
  const TensorSlot &operand(std::string_view name) const;
  const TensorSlot &result(std::string_view name) const;
  /// An optional operand, or null where the entry leaves it out.
  const TensorSlot *optionalOperand(std::string_view name) const;
  /// A scalar or boolean attribute (the contract guarantees it is there).
  double number(const std::string &key) const;
  bool flag(const std::string &key) const { return number(key) != 0; }
  /// An array attribute.
  std::vector<int64_t> ints(const std::string &key) const;
  /// BundleError "kernel 3 (conv): <why>".
  [[noreturn]] void fail(const std::string &why) const;
};

/// A generated loop of a phase's code (one op's loops, in a function of
/// its own), which the code brackets with gpipe_loop() calls.
struct LoopSpec {
  int64_t id = 0;
  std::string op; // the model op (ONNX node) it computes, or ""
};

/// One entry point of a stage's code with its own arena: the whole stage
/// (inference), or its forward or backward phase (training).
struct PhaseSpec {
  std::string role; // "forward", "backward"
  std::string entry;
  int64_t arenaSize = 0;
  /// The role of the phase whose arena this one shares ("": its own); the
  /// shared arena is as large as either needs. A training stage's backward
  /// shares its forward's: what it reads of the forward's values sits where
  /// the forward left it.
  std::string arenaOf;
  std::vector<TensorSlot> inputs, outputs;
  std::vector<KernelSpec> kernels;
  std::vector<LoopSpec> loops;

  /// The input or output named `name`, or null.
  const TensorSlot *input(const std::string &name) const;
  const TensorSlot *output(const std::string &name) const;
};

/// The tensors of a message between neighbouring stages, packed one after
/// the other: each is an input or output of a phase of this stage (`slot`,
/// an index) at `offset` in the message. For received activations
/// `senderSlot` is the sender's forward output it comes from.
struct MessageLayout {
  struct Entry {
    size_t slot = 0;
    int64_t offset = 0;
    size_t senderSlot = 0;
    /// A float32 tensor carried in bfloat16 (manifest "dtype": "bf16"):
    /// numElements() * 2 bytes at `offset`, its receiver only multiplies
    /// it in bfloat16.
    bool bf16 = false;
  };
  int64_t bytes = 0;
  std::vector<Entry> tensors;
};

/// How a training stage's phases connect to each other, to the batch and to
/// the neighbouring stages, by index (manifest "wiring"; docs/bundle.md).
struct WiringSpec {
  MessageLayout sendActivations, recvActivations; // forward outputs, inputs
  MessageLayout sendGradients, recvGradients;     // backward outputs, inputs
  /// A backward input: a forward output or received input kept in the
  /// stash at stashOffset, or a data input read again from the batch.
  struct Carried {
    enum class From { ForwardOutput, ForwardInput, Batch } from;
    size_t input = 0; // backward input
    size_t index = 0; // forward output or input
    int64_t stashOffset = 0;
    /// Kept in the stash as bfloat16 (a float32 tensor its backward only
    /// multiplies in bfloat16): rounded in, widened out.
    bool bf16 = false;
  };
  std::vector<Carried> carried;
  /// An input of a split backward's weight part (phase "backward_weight";
  /// the input part is "backward_input"), resolved when the bundle is read:
  /// Kept, one of the input part's inputs (or outputs: fromOutput) copied
  /// into the micro-batch's stash slot at stashOffset as the input part
  /// runs (a received gradient, a value it computed); else read again as
  /// the input part reads it: the stash at stashOffset, forward input
  /// `index` from the batch, or the loss gradient's seed.
  struct WeightInput {
    enum class From { Kept, Stash, Batch, LossSeed } from = From::Kept;
    size_t input = 0; // weight part input
    bool fromOutput = false;
    size_t index = 0; // Kept: input part input (or output); Batch: forward
                      // input
    int64_t stashOffset = 0;
    bool bf16 = false; // Stash: the carried tensor's Carried::bf16
  };
  std::vector<WeightInput> weightInputs;
  /// The whole stash slot of a micro-batch, kept values included.
  int64_t stashBytes = 0;
  /// A trained parameter (index into the stage's parameters), its gradient
  /// (backward output, or weight part output when the backward is split)
  /// and the optimizer input where the micro-batches'
  /// gradients are summed. A weight that several stages share (tied
  /// embeddings) lists them all in `tiedStages` (ascending, this one
  /// included) under one `tie` id: before the optimizer step their sums
  /// are added up, in stage order, on every one of them.
  struct Trained {
    size_t parameter = 0, gradient = 0, sum = 0;
    std::vector<int64_t> tiedStages;
    int64_t tie = -1;
  };
  std::vector<Trained> trained;
  std::vector<std::pair<Hyper, size_t>> hyper; // optimizer inputs
  /// Forward output / backward input indices, or -1.
  int64_t loss = -1, lossGrad = -1, output = -1;
};

/// A stage's own parameters: one blob (a file of the bundle) with its
/// tensors at their offsets.
struct ParameterBlob {
  std::string file;
  int64_t size = 0;
  uint32_t crc32 = 0;
  std::vector<TensorSlot> tensors;
};

struct StageSpec {
  int64_t index = 0;
  std::string device;
  /// The MPI rank that runs the stage (0 in a one-process bundle); with
  /// data parallelism, the rank of its first replica.
  int64_t rank = 0;
  /// The rank of each data-parallel replica of the stage: replica r runs
  /// on rank r * ranksPerReplica() + rank (just `rank` without data
  /// parallelism).
  std::vector<int64_t> replicaRanks;
  std::string library; // file name inside the bundle
  uint32_t crc32 = 0;
  /// GPU kernels of a CUDA stage (manifest "device_code"): the kernels its
  /// library launches by index, as PTX and, when the compiler had ptxas,
  /// as a cubin for `arch`.
  struct DeviceCode {
    std::string arch;
    std::vector<std::string> kernels;
    struct Part {
      std::string file;
      int64_t size = 0;
      uint32_t crc32 = 0;
    };
    std::optional<Part> ptx, cubin;
  };
  std::optional<DeviceCode> deviceCode;
  ParameterBlob parameters;
  /// At least one; the first is the one inference runs.
  std::vector<PhaseSpec> phases;
  WiringSpec wiring; // training bundles

  /// The phase with this role, or null.
  const PhaseSpec *phase(const std::string &role) const;
  /// The role of the backward phase that receives the output gradients
  /// and sends the input gradients: "backward", or "backward_input" when
  /// the backward is split (its weight part: "backward_weight").
  std::string backwardRole() const {
    return phase("backward_weight") ? "backward_input" : "backward";
  }
  /// The bytes of the arena `phase` (an index into `phases`) allocates: as
  /// many as it and the phases sharing its arena need; 0 for a phase that
  /// shares another's (PhaseSpec::arenaOf).
  int64_t arenaBytes(size_t phase) const;
};

/// How a training bundle trains (manifest "training").
struct TrainingSpec {
  int64_t batchSize = 0, microBatches = 1;
  std::string loss;
  int64_t ignoreIndex = -100; // cross-entropy labels that count for nothing
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0, weightDecay = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// Replicas of the pipeline (--data-parallel): each trains on its own
  /// batchSize rows of a global batch of dataParallel * batchSize.
  int64_t dataParallel = 1;
};

/// One instruction of a device's stream (docs/bundle.md).
struct Instruction {
  using Op = InstructionOp;
  Op op = Op::Forward;
  int64_t microBatch = -1;
  int64_t peer = -1;
  /// A compute instruction's place in its device's order where stages
  /// share the device (StreamSpec::deviceGroup); -1 otherwise.
  int64_t turn = -1;
};

/// The ordered instructions of one stage's device.
struct StreamSpec {
  int64_t stage = 0;
  std::string device;
  /// Streams of one group run on one device in turns (an interleaved
  /// schedule: Instruction::turn); -1: the stage has its device alone.
  int64_t deviceGroup = -1;
  /// Stashes alive at once: the runtime allocates this many.
  int64_t maxAlive = 1;
  int64_t predictedPeakBytes = 0;
  bool recompute = false;
  std::vector<Instruction> instructions;
  /// The compiler's predicted step of this stage (drawn by --report).
  std::vector<TimelineBox> predictedTimeline;
  /// The compiler's predicted seconds of each op of the stage per
  /// micro-batch, by the name --profile-ops times it under (set beside the
  /// measured ones after a profiled run).
  struct PredictedOp {
    std::string op;
    double forward = 0, backward = 0;
  };
  std::vector<PredictedOp> predictedOps;
};

/// The compiler's static schedule of one training step.
struct ScheduleSpec {
  std::string kind = "gpipe";
  int64_t microBatches = 1;
  double predictedStepSeconds = 0, predictedBubble = 0;
  /// One core's sgemm rate in the device profile the prediction used
  /// (GFLOP/s; 0: the compiler's built-in figures).
  double profileGflopsPerCore = 0;
  std::vector<StreamSpec> streams; // one per stage, in stage order
};

struct Bundle {
  std::string path;
  std::string model, mode, targetCpu;
  /// "fp32", or "bf16": the products of matrices multiply in bfloat16
  /// (their kernels' compute_type; manifest "precision").
  std::string precision = "fp32";
  /// The x86-64 extensions the stages' native code may use (LLVM's names;
  /// manifest "target_features"): load() refuses a bundle whose features
  /// this machine lacks (gpipe/common/CpuFeatures.h).
  std::vector<std::string> targetFeatures;
  std::vector<std::string> devices;
  std::vector<TensorSlot> inputs, outputs;
  std::vector<StageSpec> stages;
  TrainingSpec training;   // mode "train" only
  ScheduleSpec schedule;   // mode "train" only
  std::string sourceModel; // the ONNX model kept by training bundles, or ""

  std::string partPath(const std::string &file) const;
  /// The model input (labels included) named `name`, or null.
  const TensorSlot *input(const std::string &name) const;
  /// The processes the bundle runs in: 1 + its stages' largest rank, over
  /// every data-parallel replica.
  int64_t rankCount() const;
  /// The processes one replica of the pipeline runs in.
  int64_t ranksPerReplica() const;
};

/// Reads `path`/manifest.json and checks the format, version, every part's
/// presence, size and CRC-32, that this machine's CPU has the features the
/// native code needs (checkTargetFeatures), and, for a bundle of one rank, that
/// this host has the devices (a bundle of several ranks: each rank checks its
/// own stages' devices with checkHostHasDevices).
Bundle loadBundle(const std::string &path);

/// BundleError unless every feature of `bundle.targetFeatures` is in
/// `available` (this machine's: hostCpuFeatures()): the message names the
/// missing ones and the gpipe-opt flag that compiles for this machine.
void checkTargetFeatures(const Bundle &bundle,
                         const std::vector<std::string> &available);
/// Throws BundleError naming `devices` (device strings of `b`'s stages)
/// that this host lacks: cores beyond its count, GPUs it does not have.
void checkHostHasDevices(const Bundle &b,
                         const std::vector<std::string> &devices);

/// CRC-32 (zlib polynomial) of a byte range.
uint32_t crc32Of(const void *data, size_t size);

/// Reads a stage's parameter file in pieces of at most 1 MiB, in order,
/// handing each to `consume(offset, bytes, size)`; BundleError naming the
/// file if it is missing, unreadable, of another size than the manifest
/// says, or fails its checksum (after the last piece). loadBundle checks
/// every stage's file is there at its size; a stage executor reads its own
/// into its device, checking its checksum: a process reads and holds only
/// its stages' parameters, once.
void readParameters(const Bundle &b, const ParameterBlob &blob,
                    const std::function<void(int64_t offset, const char *bytes,
                                             int64_t size)> &consume);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_BUNDLE_H
