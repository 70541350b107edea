// The CUDA backend (built when CMake finds the CUDA toolkit): device
// memory, one stream per stage, the stage's GPU kernels loaded from the
// bundle's cubin (for this GPU's architecture) or PTX (JIT) with the CUDA
// runtime's library API and launched by its host code on that stream, and
// heavy ops on cuBLAS and cuDNN, the other kernels of the runtime's
// contract written as bodies (kernels/BodyKernel.h). Copies between host
// and GPU go through a pinned buffer and are synchronous on the stage's
// stream (the runtime's contract: a copy is done when it returns);
// overlapping them with compute on copy streams is not done yet. See
// docs/cuda.md.
#ifndef GPIPE_RUNTIME_CUDA_CUDABACKEND_H
#define GPIPE_RUNTIME_CUDA_CUDABACKEND_H

#include "DeviceBackend.h"

#include <iosfwd>
#include <memory>
#include <string>

namespace gpipe::runtime::cuda {

class CudaBackend : public DeviceBackend {
public:
  /// `name` is "cuda:N"; BundleError if that GPU cannot be used.
  CudaBackend(std::string name, int ordinal);
  ~CudaBackend() override;

  const std::string &name() const override { return name_; }
  DeviceBuffer allocate(int64_t bytes) override;
  void copyToDevice(char *dst, const void *src, int64_t bytes) override;
  void copyToHost(void *dst, const char *src, int64_t bytes) override;
  void copyOnDevice(char *dst, const char *src, int64_t bytes) override;
  void accumulate(float *dst, const float *src, int64_t count) override;
  std::unique_ptr<StageCode> loadCode(const Bundle &bundle,
                                      const StageSpec &stage) override;
  std::unique_ptr<Kernel> createKernel(const KernelSpec &spec,
                                       const KernelMemory &memory) override;
  void synchronize() override;
  /// CUDA events in the stage's stream, against a reference event taken
  /// with the host's clock when the queue is empty.
  void beginMarks() override;
  int64_t mark() override;
  double markSeconds(int64_t mark) const override;

private:
  /// The GPU's objects (stream, library handles, copy buffer).
  struct State;
  std::string name_;
  std::unique_ptr<State> device;
};

/// The plugin's functions behind gpipe::runtime::cudaDeviceCount,
/// cudaVersion and calibrateGpu (RuntimeInfo.h).
int deviceCount(std::string *reason);
std::string version();
std::string calibrate(int ordinal, std::ostream &log);

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_CUDABACKEND_H
