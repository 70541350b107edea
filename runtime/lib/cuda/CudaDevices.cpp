// CUDA device discovery (the CUDA plugin).
#include "cuda/CudaBackend.h"

#include <cuda_runtime_api.h>

namespace gpipe::runtime::cuda {

int deviceCount(std::string *reason) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (reason)
      *reason = std::string("no usable CUDA device (") +
                cudaGetErrorString(err) + ")";
    return 0;
  }
  if (count == 0 && reason)
    *reason = "no CUDA device";
  return count;
}

std::string version() {
  auto dotted = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  std::string text = "built with CUDA " + dotted(CUDART_VERSION);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    text += ", driver for CUDA " + dotted(driver);
  else
    text += ", no CUDA driver";
  return text;
}

} // namespace gpipe::runtime::cuda
