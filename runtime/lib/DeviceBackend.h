// The backend seam: what the runtime needs from a device to run a stage.
// A backend (CPU/oneDNN today; CUDA next) implements DeviceBackend; the stage
// executor, the stream runner and the sessions use nothing else of it.
// Tensors live in device memory: the runtime moves them only through a
// device's copies and reads them only on the host side of a copy.
#ifndef GPIPE_RUNTIME_DEVICEBACKEND_H
#define GPIPE_RUNTIME_DEVICEBACKEND_H

#include "Random.h"

#include "gpipe/runtime/Bundle.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// Where a stage's tensors live while it runs (device addresses).
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
  /// Changes whenever the parameters may have changed (an optimizer step,
  /// a parameter written from the host); while it holds, a kernel may reuse
  /// a parameter it converted to its own layout (a convolution's weights,
  /// read by every micro-batch of a step).
  const uint64_t *paramsVersion = nullptr;

  /// Where a result of space "target" is (the runtime's redirection of a
  /// kernel's result: a weight gradient's product into the step's sum).
  char *target = nullptr;

  /// The device address of a kernel's operand or result.
  char *address(const TensorSlot &slot) const {
    if (slot.space == "target")
      return target + slot.offset;
    return (slot.space == "params" ? params : arena) + slot.offset;
  }
  /// The version a converted copy of `slot` depends on: the parameters' for
  /// a parameter, none (converted on every run) for an arena tensor.
  const uint64_t *versionOf(const TensorSlot &slot) const {
    return slot.space == "params" ? paramsVersion : nullptr;
  }
  /// Whether `slot` never changes: a parameter of an inference bundle (a
  /// weight the graph computes lives in the arena, where other tensors
  /// take its place between runs: converted on every run).
  bool constantOf(const TensorSlot &slot) const {
    return constantParams && slot.space == "params";
  }
};

/// One heavy op of a stage (a kernel table entry), bound to its tensors at
/// load time. Runs are queued on the device that created it.
class Kernel {
public:
  virtual ~Kernel() = default;
  virtual void run() = 0;
};

/// A launch of one of a stage's GPU kernels, as the host code asks for it
/// (gpipe_cuda_launch): the kernel's index in the stage's device code, the
/// grid and block sizes, and the kernel's arguments, each widened to 64
/// bits.
struct KernelLaunch {
  int64_t kernel = 0;
  int64_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  int64_t *arguments = nullptr;
  int64_t count = 0;
};

/// A stage's compiled code loaded for a device: its phases' entry points,
/// and for a GPU the kernels they launch.
class StageCode {
public:
  /// Runs a phase on its arena and the stage's parameters; `context` is
  /// passed back to gpipe_kernel/gpipe_parallel_for/gpipe_cuda_launch
  /// calls it makes.
  using Entry = void (*)(char *arena, char *params, int64_t context);
  virtual ~StageCode() = default;
  /// The entry point named `name`, or null.
  virtual Entry entry(const std::string &name) const = 0;
  /// Queues a launch of one of the code's GPU kernels on the device;
  /// throws for code without GPU kernels.
  virtual void launch(const KernelLaunch &launch) {
    (void)launch;
    throw std::runtime_error("the stage code launched a GPU kernel on a "
                             "device that has none");
  }
};

/// Device memory, freed by the device that allocated it.
class DeviceBuffer {
public:
  using Free = void (*)(char *);
  DeviceBuffer() = default;
  DeviceBuffer(char *data, Free free) : data_(data, free) {}
  char *get() const { return data_.get(); }
  explicit operator bool() const { return data_ != nullptr; }

private:
  std::unique_ptr<char, Free> data_{nullptr, nullptr};
};

class DeviceBackend {
public:
  virtual ~DeviceBackend() = default;
  /// The device as errors name it ("cpu:0-1").
  virtual const std::string &name() const = 0;

  /// `bytes` of zeroed device memory aligned for any kernel; BundleError if
  /// the device has not enough.
  virtual DeviceBuffer allocate(int64_t bytes) = 0;
  /// Copies from host memory into device memory, device memory into host
  /// memory, and within the device.
  virtual void copyToDevice(char *dst, const void *src, int64_t bytes) = 0;
  virtual void copyToHost(void *dst, const char *src, int64_t bytes) = 0;
  virtual void copyOnDevice(char *dst, const char *src, int64_t bytes) = 0;
  /// dst[i] += src[i] for `count` float32 elements in device memory
  /// (gradient accumulation), in an order that does not depend on threads.
  virtual void accumulate(float *dst, const float *src, int64_t count) = 0;
  /// The stash's bfloat16 copies (WiringSpec::Carried::bf16): `count`
  /// float32 elements rounded to bfloat16 exactly as the device's bfloat16
  /// products round their operands, and bfloat16 elements widened back to
  /// float32 (exactly), in device memory. A device whose products
  /// do not multiply in bfloat16 never keeps such a stash: by default an
  /// error.
  virtual void roundToBf16(char *dst, const char *src, int64_t count);
  virtual void widenBf16(char *dst, const char *src, int64_t count);

  /// Loads the code of `stage` of `bundle`: its library (host code) and,
  /// for a GPU, its device code.
  virtual std::unique_ptr<StageCode> loadCode(const Bundle &bundle,
                                              const StageSpec &stage) = 0;
  /// Creates the kernel of one table entry (checked against the contract)
  /// on `memory`; BundleError naming the kernel if the device cannot run
  /// it.
  virtual std::unique_ptr<Kernel> createKernel(const KernelSpec &spec,
                                               const KernelMemory &memory) = 0;
  /// Whether createKernel() takes `spec` with the number "accumulate" set:
  /// the kernel then adds its one result into what its result's memory
  /// holds (result += product), rounding as the product written apart and
  /// then accumulate()d would. None by default.
  virtual bool canAccumulate(const KernelSpec &spec) const {
    (void)spec;
    return false;
  }
  /// Waits until the work queued on the device is done.
  virtual void synchronize() = 0;
  /// Bytes the device's kernels hold beyond the stages' arenas and
  /// parameters (parameters converted to a kernel's layout, the buffers
  /// kernels use while they run), as far as the backend knows them.
  virtual int64_t kernelBytes() const { return 0; }

  /// Timing of queued work (traces, --profile-ops): beginMarks() starts a
  /// set of marks (the queue is empty); mark() records a point of the
  /// device's queue and returns its number; after synchronize(),
  /// markSeconds(n) is the steady-clock time at which the device passed
  /// mark n. A device that runs work as it is queued (the CPU) takes the
  /// host's clock at mark(); a GPU records events in its stream.
  virtual void beginMarks() { marks.clear(); }
  virtual int64_t mark();
  virtual double markSeconds(int64_t mark) const {
    return marks.at(static_cast<size_t>(mark));
  }

private:
  std::vector<double> marks;
};

/// The backend of a stage's device ("cpu:0-1"): BundleError if this
/// runtime was built without it or the machine lacks it.
std::unique_ptr<DeviceBackend> createBackend(const std::string &device);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_DEVICEBACKEND_H
