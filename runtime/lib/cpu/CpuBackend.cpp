#include "CpuBackend.h"

#include "kernels/Families.h"

#include "ParallelFor.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace gpipe::runtime::cpu {

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

/// A stage library opened with dlopen; its entry points are native
/// functions.
class NativeLibrary : public StageCode {
public:
  explicit NativeLibrary(const std::string &path)
      : handle(openStageLibrary(path)) {
    if (!handle)
      throw BundleError(path + ": cannot load the stage library: " + dlerror());
  }
  ~NativeLibrary() override { dlclose(handle); }
  NativeLibrary(const NativeLibrary &) = delete;
  NativeLibrary &operator=(const NativeLibrary &) = delete;
  Entry entry(const std::string &name) const override {
    return reinterpret_cast<Entry>(dlsym(handle, name.c_str()));
  }

private:
  void *handle;
};

void freeAligned(char *p) { std::free(p); }

} // namespace

CpuBackend::CpuBackend(std::string name)
    : name_(std::move(name)), dnn(std::make_unique<OneDnn>()) {}

CpuBackend::~CpuBackend() = default;

DeviceBuffer CpuBackend::allocate(int64_t size) {
  size_t bytes =
      (static_cast<size_t>(std::max<int64_t>(size, 1)) + 63) / 64 * 64;
  char *p = static_cast<char *>(std::aligned_alloc(64, bytes));
  if (!p)
    throw BundleError(name_ + ": cannot allocate " + std::to_string(bytes) +
                      " bytes");
  std::memset(p, 0, bytes);
  return DeviceBuffer(p, freeAligned);
}

void CpuBackend::copyToDevice(char *dst, const void *src, int64_t bytes) {
  parallelCopy(dst, src, bytes);
}

void CpuBackend::copyToHost(void *dst, const char *src, int64_t bytes) {
  parallelCopy(dst, src, bytes);
}

void CpuBackend::copyOnDevice(char *dst, const char *src, int64_t bytes) {
  parallelCopy(dst, src, bytes);
}

void CpuBackend::accumulate(float *dst, const float *src, int64_t count) {
  parallelAccumulate(dst, src, count);
}

std::unique_ptr<StageCode> CpuBackend::loadCode(const std::string &path) {
  return std::make_unique<NativeLibrary>(path);
}

std::unique_ptr<Kernel> CpuBackend::createKernel(const KernelSpec &spec,
                                                 const KernelMemory &memory) {
  KernelFactory create = findKernelFactory(spec.kind);
  if (!create)
    spec.fail("the CPU backend has no kernel of this kind");
  try {
    return create(spec, memory, *dnn);
  } catch (const dnnl::error &e) {
    spec.fail(std::string("oneDNN cannot create it: ") + e.what());
  }
}

void CpuBackend::synchronize() { dnn->stream.wait(); }

} // namespace gpipe::runtime::cpu
