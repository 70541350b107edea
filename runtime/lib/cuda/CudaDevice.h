// What the CUDA backend's kernels share of their GPU: its stream, library
// handles and scratch workspace, and error checks that name the device and
// the call. Included only by the CUDA backend's own files.
#ifndef GPIPE_RUNTIME_CUDA_CUDADEVICE_H
#define GPIPE_RUNTIME_CUDA_CUDADEVICE_H

#include "DeviceBackend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#ifdef GPIPE_HAVE_CUDNN
#include <cudnn.h>
#endif

#include <memory>
#include <string>

namespace gpipe::runtime::cuda {

/// Throws BundleError naming the device, the call and CUDA's reason.
void check(cudaError_t err, const std::string &device, const char *call);
void check(cublasStatus_t status, const std::string &device, const char *call);
#ifdef GPIPE_HAVE_CUDNN
void check(cudnnStatus_t status, const std::string &device, const char *call);
#endif

struct CudaDevice {
  std::string name;
  int ordinal = 0;
  /// "sm_90": the architecture whose cubin this GPU runs.
  std::string arch;
  /// The stage's compute stream; every kernel and copy is queued on it.
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
#ifdef GPIPE_HAVE_CUDNN
  cudnnHandle_t dnn = nullptr;
#endif
  /// Scratch memory of library calls (cuDNN), shared by the stage's
  /// kernels (they run one after the other on the stream), grown at load.
  DeviceBuffer workspace;
  int64_t workspaceBytes = 0;

  /// Makes this GPU the calling thread's current one (each stage runs on
  /// its own thread).
  void use() const { check(cudaSetDevice(ordinal), name, "cudaSetDevice"); }
  void wait() const {
    check(cudaStreamSynchronize(stream), name, "cudaStreamSynchronize");
  }
  /// `bytes` of GPU memory (rounded up to 256); BundleError naming the
  /// device when it has not enough.
  DeviceBuffer allocate(int64_t bytes) const;
  /// Grows the workspace to at least `bytes`.
  void reserveWorkspace(int64_t bytes);
};

/// Kernels of the CUDA backend, by family (kernels/*): null when the kind
/// is not one of the family's.
std::unique_ptr<Kernel> createBlasKernel(CudaDevice &device,
                                         const KernelSpec &spec,
                                         const KernelMemory &memory);
std::unique_ptr<Kernel> createConvKernel(CudaDevice &device,
                                         const KernelSpec &spec,
                                         const KernelMemory &memory);
std::unique_ptr<Kernel> createCudaBodyKernel(CudaDevice &device,
                                             const KernelSpec &spec,
                                             const KernelMemory &memory);

/// Queues a kernel that does nothing (one block of 256 threads, as the
/// generated kernels' blocks) on `stream`: what --calibrate=cuda:N times
/// as the cost of a launch.
cudaError_t launchEmptyKernel(cudaStream_t stream);

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_CUDADEVICE_H
