// Runs one compiled stage: its native library, arena, parameters and
// kernels.
#ifndef GPIPE_RUNTIME_STAGEEXECUTOR_H
#define GPIPE_RUNTIME_STAGEEXECUTOR_H

#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/Kernels.h"

#include <memory>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// Dispatches a kernel call of generated code (gpipe_kernel's context).
void gpipeKernel(int64_t ctx, int64_t id);

/// An outlined loop body of generated code: runs outer iterations
/// [begin, end) on the phase's arena and the parameters.
using LoopBody = void (*)(char *arena, char *params, int64_t begin,
                          int64_t end);
/// Runs `body` over [0, extent) on the calling thread's OpenMP threads
/// (gpipe_parallel_for's context).
void gpipeParallelFor(int64_t ctx, LoopBody body, int64_t extent);

/// Loads a stage of a checked bundle: dlopens its library, moves the
/// stage's parameters that loadBundle read into an aligned buffer of its
/// own (the bundle's copy is released), allocates one arena per phase and
/// creates every kernel's primitive. Nothing is created per run.
class StageExecutor {
  struct Aligned {
    void operator()(char *p) const { std::free(p); }
  };

public:
  /// 64-byte aligned, zeroed memory.
  using Buffer = std::unique_ptr<char, Aligned>;
  static Buffer allocate(int64_t size);
  /// A stage of `bundle` (`spec` is one of its stages, whose parameter
  /// bytes it takes over).
  StageExecutor(const Bundle &bundle, StageSpec &spec);
  ~StageExecutor();
  StageExecutor(const StageExecutor &) = delete;
  StageExecutor &operator=(const StageExecutor &) = delete;

  /// The phase index of `role` ("forward", "backward"); throws BundleError
  /// if the stage has no such phase.
  size_t phaseIndex(const std::string &role) const;
  const PhaseSpec &phase(size_t index) const { return spec.phases[index]; }

  char *arena(size_t phase = 0) { return phases[phase].arena.get(); }
  const char *params() const { return paramsPtr; }
  char *params() { return paramsPtr; }
  /// Bytes this stage allocated: its arenas and its parameters.
  int64_t allocatedBytes() const { return allocated; }

  /// Kernel calls are timed into `sink` while it is set (tracing).
  struct KernelEvent {
    const std::string *kind;
    double begin, end; // seconds on the steady clock
  };
  void setKernelTrace(std::vector<KernelEvent> *sink) { kernelTrace = sink; }
  /// Sums each kernel's time while set (gpipe-run --profile-ops).
  void setKernelProfile(bool enable);
  /// Seconds spent in each kernel of each phase since the profile was
  /// enabled.
  const std::vector<std::vector<double>> &kernelSeconds() const {
    return kernelTotals;
  }
  /// Runs a phase's compiled code once on its arena's contents.
  void run(size_t phase = 0);
  /// Whether runs update kernel state (BatchNorm running statistics) and
  /// apply dropout; false while evaluating.
  void setUpdateState(bool update) { updateState = update; }
  /// The random state that the next runs draw from (dropout).
  void setRandomState(const RandomState &state) { random = state; }

  /// Called by the stage code through gpipe_kernel().
  void runKernel(size_t phase, int64_t id) noexcept;
  /// Called by the stage code through gpipe_parallel_for(): `body` over
  /// [0, extent) in one contiguous chunk per OpenMP thread of the calling
  /// thread (the device's cores).
  void parallelFor(size_t phase, LoopBody body, int64_t extent) noexcept;

private:
  void load(const Bundle &bundle);

  using Entry = void (*)(char *, char *, int64_t);
  struct Phase;
  /// What gpipe_kernel's context argument points to.
  struct Context {
    StageExecutor *executor;
    size_t phase;
  };
  struct Phase {
    Buffer arena;
    Entry entry = nullptr;
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::unique_ptr<Context> context;
  };

  const StageSpec &spec;
  Buffer params_;
  char *paramsPtr = nullptr;
  int64_t allocated = 0;
  std::vector<KernelEvent> *kernelTrace = nullptr;
  bool profiling = false;
  std::vector<std::vector<double>> kernelTotals; // [phase][kernel]
  void *library = nullptr;
  struct Engine;
  std::unique_ptr<Engine> engine;
  std::vector<Phase> phases;
  std::string kernelError;
  bool updateState = true;
  RandomState random;

  friend void gpipeKernel(int64_t, int64_t);
  friend void gpipeParallelFor(int64_t, LoopBody, int64_t);
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_STAGEEXECUTOR_H
