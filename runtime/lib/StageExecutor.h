// Runs one compiled stage on its device: its code, arenas, parameters and
// kernels, all created through the stage's DeviceBackend at load time.
#ifndef GPIPE_RUNTIME_STAGEEXECUTOR_H
#define GPIPE_RUNTIME_STAGEEXECUTOR_H

#include "DeviceBackend.h"

#include "gpipe/runtime/Bundle.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// Dispatches a kernel call of generated code (gpipe_kernel's context).
void gpipeKernel(int64_t ctx, int64_t id);
/// Brackets a generated loop of generated code (gpipe_loop's context).
void gpipeLoop(int64_t ctx, int64_t id, int64_t end);
/// Dispatches a GPU kernel launch of generated host code
/// (gpipe_cuda_launch's context).
void gpipeCudaLaunch(int64_t ctx, const KernelLaunch &launch);

/// An outlined loop body of generated code: runs outer iterations
/// [begin, end) on the phase's arena and the parameters.
using LoopBody = void (*)(char *arena, char *params, int64_t begin,
                          int64_t end);
/// Runs `body` over [0, extent) on the calling thread's OpenMP threads
/// (gpipe_parallel_for's context).
void gpipeParallelFor(int64_t ctx, LoopBody body, int64_t extent);

/// Loads a stage of a checked bundle on its device: loads its code, moves
/// the stage's parameters that loadBundle read into device memory of its
/// own (the bundle's copy is released), allocates the phases' arenas (a
/// phase may share another's: PhaseSpec::arenaOf) and
/// creates every kernel. Nothing is created per run.
class StageExecutor {
public:
  /// A stage of `bundle` (`spec` is one of its stages, whose parameter
  /// bytes it takes over) on `device`.
  StageExecutor(const Bundle &bundle, StageSpec &spec,
                std::unique_ptr<DeviceBackend> device);
  ~StageExecutor();
  StageExecutor(const StageExecutor &) = delete;
  StageExecutor &operator=(const StageExecutor &) = delete;

  DeviceBackend &device() { return *device_; }
  const DeviceBackend &device() const { return *device_; }
  /// The phase index of `role` ("forward", "backward"); throws BundleError
  /// if the stage has no such phase.
  size_t phaseIndex(const std::string &role) const;
  const PhaseSpec &phase(size_t index) const { return spec.phases[index]; }

  /// Device addresses of a phase's arena and of the parameters.
  char *arena(size_t phase = 0) { return phases[phase].arena; }
  const char *arena(size_t phase = 0) const { return phases[phase].arena; }
  char *params() { return params_.get(); }
  const char *params() const { return params_.get(); }
  /// Copies a tensor of a phase's arena from or to host memory.
  void write(size_t phase, const TensorSlot &slot, const void *host) {
    device_->copyToDevice(arena(phase) + slot.offset, host, slot.byteSize());
  }
  void read(size_t phase, const TensorSlot &slot, void *host) const {
    device_->copyToHost(host, arena(phase) + slot.offset, slot.byteSize());
  }
  /// Copies a parameter (a slot of the stage's parameters) from or to host
  /// memory.
  void writeParameter(const TensorSlot &slot, const void *host) {
    device_->copyToDevice(params() + slot.offset, host, slot.byteSize());
    ++paramsVersion;
  }
  void readParameter(const TensorSlot &slot, void *host) const {
    device_->copyToHost(host, params() + slot.offset, slot.byteSize());
  }
  /// Bytes this stage allocated: its arenas and its parameters.
  int64_t allocatedBytes() const { return allocated; }

  /// Kernel calls are timed into `sink` while it is set (tracing).
  /// A library kernel's or a generated loop's run.
  struct KernelEvent {
    const std::string *op;    // the model op (ONNX node), or ""
    const std::string *kind;  // the kernel's kind, or "loop"
    const std::string *phase; // forward, backward, optimizer
    double begin, end;        // seconds on the steady clock
  };
  void setKernelTrace(std::vector<KernelEvent> *sink) { kernelTrace = sink; }
  /// Sums each kernel's and each generated loop's time while set
  /// (gpipe-run --profile-ops).
  void setKernelProfile(bool enable);
  /// Seconds spent in each kernel of each phase since the profile was
  /// enabled.
  const std::vector<std::vector<double>> &kernelSeconds() const {
    return kernelTotals;
  }
  /// The same for each generated loop of each phase.
  const std::vector<std::vector<double>> &loopSeconds() const {
    return loopTotals;
  }
  /// Runs a phase's compiled code once on its arena's contents.
  void run(size_t phase = 0);
  /// Whether runs update kernel state (BatchNorm running statistics) and
  /// apply dropout; false while evaluating.
  void setUpdateState(bool update) { updateState = update; }
  /// The random state that the next runs draw from (dropout).
  void setRandomState(const RandomState &state) { random = state; }

  /// Has kernel `id` of `phase`, the only writer of its one result, write
  /// that result at `target` instead (device memory of the result's size:
  /// a trained weight's gradient sum where the optimizer reads it), either
  /// over it or added into it as setTargetAccumulates() says. False, and
  /// nothing changed, where the device's kernel cannot add into its result
  /// (DeviceBackend::canAccumulate).
  bool retarget(size_t phase, int64_t id, char *target);
  /// Whether the retargeted kernels of `phase` add into their targets
  /// (false: they overwrite them) on its next runs.
  void setTargetAccumulates(size_t phase, bool accumulate) {
    phases.at(phase).accumulate = accumulate;
  }

  /// Called by the stage code through gpipe_kernel().
  void runKernel(size_t phase, int64_t id) noexcept;
  /// Called by the stage code through gpipe_loop() before (`end` 0) and
  /// after (1) each generated loop.
  void markLoop(size_t phase, int64_t id, int64_t end) noexcept;
  /// Called by the stage's host code through gpipe_cuda_launch().
  void launch(const KernelLaunch &launch) noexcept;
  /// Called by the stage code through gpipe_parallel_for(): `body` over
  /// [0, extent) in one contiguous chunk per OpenMP thread of the calling
  /// thread (the device's cores).
  void parallelFor(size_t phase, LoopBody body, int64_t extent) noexcept;

private:
  void load(const Bundle &bundle);

  /// What gpipe_kernel's context argument points to.
  struct Context {
    StageExecutor *executor;
    size_t phase;
  };
  struct Phase {
    DeviceBuffer own; // empty when it shares another phase's arena
    char *arena = nullptr;
    StageCode::Entry entry = nullptr;
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::unique_ptr<Context> context;
    /// retarget(): by kernel id, the kernel that overwrites its target and
    /// the one that adds into it, and the specs they were made from.
    struct Retargeted {
      std::unique_ptr<KernelSpec> over, into;
      std::unique_ptr<Kernel> overwrite, add;
    };
    std::map<int64_t, Retargeted> retargeted;
    bool accumulate = false;
  };

  const StageSpec &spec;
  std::unique_ptr<DeviceBackend> device_;
  DeviceBuffer params_;
  int64_t allocated = 0;
  std::vector<KernelEvent> *kernelTrace = nullptr;
  /// The device marks around each timed kernel run of the current phase
  /// (kernel id, begin, end), read when the phase's work is done.
  struct TimedRun {
    int64_t kernel, begin, end;
    bool loop; // a generated loop's id, not a kernel's
  };
  std::vector<TimedRun> timedRuns;
  /// The mark at the start of the generated loop running now.
  int64_t loopBegin = 0;
  bool profiling = false;
  std::vector<std::vector<double>> kernelTotals; // [phase][kernel]
  std::vector<std::vector<double>> loopTotals;   // [phase][loop]
  std::unique_ptr<StageCode> code;
  std::vector<Phase> phases;
  std::string kernelError;
  bool updateState = true;
  RandomState random;
  /// Incremented whenever the parameters may have changed: after a phase
  /// other than a forward or a backward (the optimizer's) and after a
  /// write from the host (KernelMemory::paramsVersion).
  uint64_t paramsVersion = 0;

  friend void gpipeKernel(int64_t, int64_t);
  friend void gpipeLoop(int64_t, int64_t, int64_t);
  friend void gpipeParallelFor(int64_t, LoopBody, int64_t);
  friend void gpipeCudaLaunch(int64_t, const KernelLaunch &);
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_STAGEEXECUTOR_H
