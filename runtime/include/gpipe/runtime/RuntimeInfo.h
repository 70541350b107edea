// What this runtime build can run on.
#ifndef GPIPE_RUNTIME_RUNTIMEINFO_H
#define GPIPE_RUNTIME_RUNTIMEINFO_H

#include <string>

namespace gpipe::runtime {

/// oneDNN version, e.g. "2.6.3".
std::string onednnVersion();

/// Number of CUDA devices visible; 0 when there are none or CUDA support
/// is not built (then `reason` says why).
int cudaDeviceCount(std::string *reason = nullptr);

/// Whether the runtime was built with MPI.
bool hasMpi();

/// A multi-line description for `gpipe-run --version`.
std::string runtimeInfo();

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_RUNTIMEINFO_H
