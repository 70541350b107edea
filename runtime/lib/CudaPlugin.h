// The CUDA backend is a plugin: libgpipe_runtime_cuda.so, next to
// libgpipe_runtime.so, loaded the first time a process asks for a GPU
// (a cuda:N stage, --calibrate=cuda:N, --list-devices). `--version` and
// CPU bundles never load it: a CPU run maps no CUDA library, and runs where
// the plugin or the CUDA libraries are absent.
// Linking cuBLAS into the runtime cost every process ~140 ms of cuBLASLt's
// initialization at start, `gpipe-run --help` and every gpipe-opt
// included, whether it used a GPU or not.
#ifndef GPIPE_RUNTIME_CUDAPLUGIN_H
#define GPIPE_RUNTIME_CUDAPLUGIN_H

#include <iosfwd>
#include <memory>
#include <string>

namespace gpipe::runtime {

class DeviceBackend;

/// What the plugin offers; both sides are built together, so C++ types
/// cross the boundary. `abi` guards against a stale plugin file.
struct CudaPluginApi {
  static constexpr int kAbi = 1;
  int abi;
  /// The backend of GPU `ordinal`, named `device` ("cuda:N").
  std::unique_ptr<DeviceBackend> (*createBackend)(const std::string &device,
                                                  int ordinal);
  /// GPUs visible; 0 with `reason` set when there are none.
  int (*deviceCount)(std::string *reason);
  /// "built with CUDA 13.0, driver for CUDA 12.8".
  std::string (*version)();
  /// gpipe::runtime::calibrateGpu.
  std::string (*calibrate)(int ordinal, std::ostream &log);
};

/// The plugin, loaded on the first call; nullptr when this runtime was
/// built without CUDA or the library cannot be loaded (`reason` says
/// which, naming the file and the loader's error).
const CudaPluginApi *cudaPlugin(std::string *reason);

/// One line on the plugin without loading it: its file and the CUDA it was
/// built with, or why there is none.
std::string cudaPluginSummary();

} // namespace gpipe::runtime

/// The plugin's one exported entry point.
extern "C" const gpipe::runtime::CudaPluginApi *gpipe_cuda_plugin_api();

#endif // GPIPE_RUNTIME_CUDAPLUGIN_H
