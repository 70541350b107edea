// Heavy ops of a stage, run by oneDNN primitives created once at load time.
#ifndef GPIPE_RUNTIME_KERNELS_H
#define GPIPE_RUNTIME_KERNELS_H

#include "gpipe/runtime/Bundle.h"

#include <cstdint>
#include <memory>

namespace dnnl {
struct engine;
struct stream;
} // namespace dnnl

namespace gpipe::runtime {

/// What random kernels (dropout) draw from: element i of the op numbered
/// `stream` is a function of (seed, step, microBatch, stream, i) alone, so
/// a backward regenerates its forward's mask and a resumed run repeats the
/// draws of an uninterrupted one.
struct RandomState {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t microBatch = 0;
};

/// The key of the stream numbered `stream` in this state.
uint64_t randomStreamKey(const RandomState &state, int64_t stream);
/// The uniform number in [0, 1) (24 bits) of one element of a stream.
float randomUniform(uint64_t key, int64_t element);

/// Where a stage's tensors live while it runs.
struct KernelMemory {
  char *arena = nullptr;
  char *params = nullptr;
  /// Parameters never change (inference): kernels may keep them in their
  /// own layouts, converted once.
  bool constantParams = false;
  /// Whether stateful kernels (BatchNorm's running statistics) update their
  /// state on this run: true in training steps, false in evaluation.
  const bool *updateState = nullptr;
  /// The current step's random state (dropout).
  const RandomState *random = nullptr;
};

class Kernel {
public:
  virtual ~Kernel() = default;
  /// Runs the op on the stage's buffers.
  virtual void run(dnnl::stream &stream) = 0;
};

/// Creates the primitive of one kernel table entry, bound to the arena and
/// parameter buffers. Throws BundleError naming the kernel for kinds, types
/// or attributes the runtime cannot run.
std::unique_ptr<Kernel> createKernel(const KernelSpec &spec,
                                     const KernelMemory &memory,
                                     dnnl::engine &engine);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_KERNELS_H
