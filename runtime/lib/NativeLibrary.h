// A stage's host code: the shared library gpipe-opt linked for the host,
// opened with dlopen; its entry points are native functions. CPU stages
// run it as their code; CUDA stages run it as the host side that launches
// their GPU kernels.
#ifndef GPIPE_RUNTIME_NATIVELIBRARY_H
#define GPIPE_RUNTIME_NATIVELIBRARY_H

#include "DeviceBackend.h"

#include <string>

namespace gpipe::runtime {

class NativeLibrary : public StageCode {
public:
  /// Opens `path`; BundleError naming it and dlerror's reason if it cannot.
  explicit NativeLibrary(const std::string &path);
  ~NativeLibrary() override;
  NativeLibrary(const NativeLibrary &) = delete;
  NativeLibrary &operator=(const NativeLibrary &) = delete;
  Entry entry(const std::string &name) const override;

private:
  void *handle;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_NATIVELIBRARY_H
