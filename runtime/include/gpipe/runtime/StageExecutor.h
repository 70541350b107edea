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

/// Loads a stage of a checked bundle: dlopens its library, moves the
/// parameters loadBundle read into an aligned buffer (the bundle's copy is
/// released), allocates the arena and creates every kernel's primitive.
/// Nothing is created per run.
class StageExecutor {
public:
  StageExecutor(Bundle &bundle, const StageSpec &spec);
  ~StageExecutor();
  StageExecutor(const StageExecutor &) = delete;
  StageExecutor &operator=(const StageExecutor &) = delete;

  char *arena() { return arena_.get(); }
  const char *params() const { return params_.get(); }
  char *params() { return params_.get(); }
  /// Runs the stage's compiled code once on the arena's contents.
  void run();
  /// Whether runs update kernel state (BatchNorm running statistics).
  void setUpdateState(bool update) { updateState = update; }
  /// The random state that the next runs draw from (dropout).
  void setRandomState(const RandomState &state) { random = state; }

  /// Called by the stage code through gpipe_kernel().
  void runKernel(int64_t id) noexcept;

private:
  struct Aligned {
    void operator()(char *p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<char, Aligned>;
  static Buffer allocate(int64_t size);

  const StageSpec &spec;
  Buffer arena_, params_;
  void *library = nullptr;
  using Entry = void (*)(char *, char *, int64_t);
  Entry entry = nullptr;
  struct Engine;
  std::unique_ptr<Engine> engine;
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::string kernelError;
  bool updateState = true;
  RandomState random;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_STAGEEXECUTOR_H
