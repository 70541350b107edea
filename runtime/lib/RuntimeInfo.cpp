#include "gpipe/runtime/RuntimeInfo.h"

#include <dnnl.h>

#include <thread>

namespace gpipe::runtime {

std::string onednnVersion() {
  const dnnl_version_t *v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

#ifndef GPIPE_HAVE_CUDA
int cudaDeviceCount(std::string *reason) {
  if (reason)
    *reason = "this runtime was built without CUDA support";
  return 0;
}
#endif

bool hasMpi() {
#ifdef GPIPE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string runtimeInfo() {
  std::string reason;
  int gpus = cudaDeviceCount(&reason);
  std::string info = "oneDNN " + onednnVersion() + " (CPU kernels), " +
                     std::to_string(std::thread::hardware_concurrency()) +
                     " CPU cores\n";
  info += "CUDA: " + (gpus > 0 ? std::to_string(gpus) + " device(s)" : reason) +
          "\n";
  info += std::string("MPI: ") + (hasMpi() ? "built in" : "not built") + "\n";
  return info;
}

} // namespace gpipe::runtime
