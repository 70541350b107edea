// The CUDA launcher of the body kernels (BodyKernel.h): each body runs as a
// grid-stride loop, 256 threads a block, on the stage's stream.
#include "../CudaDevice.h"
#include "BodyKernels.h"

#include <algorithm>

namespace gpipe::runtime::cuda {

namespace {

template <class Body> __global__ void runBody(Body body, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    body(i);
}

constexpr int64_t kThreads = 256;
/// Enough blocks to fill any GPU; the loop covers the rest.
constexpr int64_t kMaxBlocks = 65536;

struct CudaLauncher {
  const CudaDevice *device;

  template <class Body> void launch(int64_t n, const Body &body) const {
    if (n <= 0)
      return;
    int64_t blocks = std::min(ceilDiv(n, kThreads), kMaxBlocks);
    runBody<<<static_cast<unsigned>(blocks), static_cast<unsigned>(kThreads), 0,
              device->stream>>>(body, n);
    check(cudaGetLastError(), device->name, "a kernel launch");
  }
  DeviceBuffer allocate(int64_t bytes) const { return device->allocate(bytes); }
  void copy(void *dst, const void *src, int64_t bytes) const {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                          cudaMemcpyDeviceToDevice, device->stream),
          device->name, "cudaMemcpyAsync");
  }
  void toHost(void *dst, const void *src, int64_t bytes) const {
    check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                          cudaMemcpyDeviceToHost, device->stream),
          device->name, "cudaMemcpyAsync from the GPU");
    device->wait();
  }
};

__global__ void doNothing() {}

} // namespace

cudaError_t launchEmptyKernel(cudaStream_t stream) {
  doNothing<<<1, static_cast<unsigned>(kThreads), 0, stream>>>();
  return cudaGetLastError();
}

std::unique_ptr<Kernel> createCudaBodyKernel(CudaDevice &device,
                                             const KernelSpec &spec,
                                             const KernelMemory &memory) {
  return createBodyKernel(CudaLauncher{&device}, spec, memory);
}

} // namespace gpipe::runtime::cuda
