#include "NativeLibrary.h"

#include <dlfcn.h>

namespace gpipe::runtime {

namespace {

/// Stage libraries call back into the runtime (gpipe_kernel, ...), whose
/// symbols they find only in the global scope: where the runtime was
/// loaded with RTLD_LOCAL (as the dependency of a Python extension
/// module), it is promoted to the global scope first. The reference taken
/// is never given back (the runtime outlives its stages).
void *openStageLibrary(const std::string &path) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&openStageLibrary), &info) != 0 &&
      info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
}

} // namespace

NativeLibrary::NativeLibrary(const std::string &path)
    : handle(openStageLibrary(path)) {
  if (!handle)
    throw BundleError(path + ": cannot load the stage library: " + dlerror());
}

NativeLibrary::~NativeLibrary() { dlclose(handle); }

StageCode::Entry NativeLibrary::entry(const std::string &name) const {
  return reinterpret_cast<Entry>(dlsym(handle, name.c_str()));
}

} // namespace gpipe::runtime
