// CUDA device discovery (built only when a CUDA toolkit is found).
#include "gpipe/runtime/RuntimeInfo.h"

#include <cuda_runtime_api.h>

namespace gpipe::runtime {

int cudaDeviceCount(std::string *reason) {
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

} // namespace gpipe::runtime
