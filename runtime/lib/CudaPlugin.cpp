#include "CudaPlugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>

namespace gpipe::runtime {

namespace {

/// The loaded plugin or why there is none. One per process, as the
/// dynamic loader's own state is: loading twice would gain nothing.
struct Loaded {
  const CudaPluginApi *api = nullptr;
  std::string reason;
};

#ifdef GPIPE_HAVE_CUDA
/// libgpipe_runtime_cuda.so in the directory of this library.
std::string pluginPath() {
  Dl_info info{};
  std::string self;
  if (dladdr(reinterpret_cast<void *>(&cudaPlugin), &info) && info.dli_fname)
    self = info.dli_fname;
  size_t slash = self.rfind('/');
  std::string dir = slash == std::string::npos ? "." : self.substr(0, slash);
  return dir + "/libgpipe_runtime_cuda.so";
}

#endif

Loaded load() {
  Loaded loaded;
#ifndef GPIPE_HAVE_CUDA
  loaded.reason = "this runtime was built without CUDA support";
#else
  std::string path = pluginPath();
  // RTLD_NOW: a missing CUDA library is an error here, not at a first call.
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *error = dlerror();
    loaded.reason = "the CUDA backend cannot be loaded (" +
                    std::string(error ? error : path) + ")";
    return loaded;
  }
  using Entry = const CudaPluginApi *(*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "gpipe_cuda_plugin_api"));
  const CudaPluginApi *api = entry ? entry() : nullptr;
  if (!api || api->abi != CudaPluginApi::kAbi) {
    loaded.reason = path + " is not this runtime's CUDA backend (rebuild it "
                           "with the runtime)";
    return loaded;
  }
  // The handle stays open for the process: backends and their kernels
  // live in it.
  loaded.api = api;
#endif
  return loaded;
}

} // namespace

std::string cudaPluginSummary() {
#ifndef GPIPE_HAVE_CUDA
  return "this runtime was built without CUDA support";
#else
  std::string path = pluginPath();
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return "the CUDA backend " + path +
           " is not installed: bundles with GPU stages cannot run here";
  return "backend " + path +
         " (built with CUDA " GPIPE_CUDA_BUILD_VERSION
         "; loaded by bundles with GPU stages; --list-devices probes the "
         "GPUs)";
#endif
}

const CudaPluginApi *cudaPlugin(std::string *reason) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.api && reason)
    *reason = loaded.reason;
  return loaded.api;
}

} // namespace gpipe::runtime
