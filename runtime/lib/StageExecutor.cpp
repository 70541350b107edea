#include "gpipe/runtime/StageExecutor.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace gpipe::runtime {

struct StageExecutor::Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

StageExecutor::Buffer StageExecutor::allocate(int64_t size) {
  size_t bytes =
      (static_cast<size_t>(std::max<int64_t>(size, 1)) + 63) / 64 * 64;
  char *p = static_cast<char *>(std::aligned_alloc(64, bytes));
  if (!p)
    throw BundleError("cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, bytes);
  return Buffer(p);
}

StageExecutor::StageExecutor(Bundle &bundle, const StageSpec &spec)
    : spec(spec), engine(std::make_unique<Engine>()) {
  arena_ = allocate(spec.arenaSize);
  params_ = allocate(bundle.paramsSize);
  if (static_cast<int64_t>(bundle.paramsData.size()) != bundle.paramsSize)
    throw BundleError(bundle.path + ": " + bundle.paramsFile +
                      ": the parameters were not loaded");
  std::memcpy(params_.get(), bundle.paramsData.data(), bundle.paramsSize);
  std::string().swap(bundle.paramsData);

  std::string libraryPath = bundle.partPath(spec.library);
  library = dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw BundleError(bundle.path + ": " + spec.library +
                      ": cannot load the stage library: " + dlerror());
  entry = reinterpret_cast<Entry>(dlsym(library, spec.entry.c_str()));
  if (!entry)
    throw BundleError(bundle.path + ": " + spec.library + ": no entry point '" +
                      spec.entry + "'");

  KernelMemory memory{arena_.get(), params_.get(), bundle.mode == "infer",
                      &updateState, &random};
  for (const KernelSpec &k : spec.kernels) {
    if (k.id != static_cast<int64_t>(kernels.size()))
      throw BundleError(bundle.path + ": manifest.json: kernel ids are not "
                                      "consecutive");
    kernels.push_back(createKernel(k, memory, engine->engine));
  }
}

StageExecutor::~StageExecutor() {
  kernels.clear();
  if (library)
    dlclose(library);
}

void StageExecutor::runKernel(int64_t id) noexcept {
  if (!kernelError.empty())
    return;
  if (id < 0 || id >= static_cast<int64_t>(kernels.size())) {
    kernelError = "the stage code called unknown kernel " + std::to_string(id);
    return;
  }
  try {
    kernels[id]->run(engine->stream);
  } catch (const std::exception &e) {
    kernelError = "kernel " + std::to_string(id) + " (" +
                  spec.kernels[id].kind + ") failed: " + e.what();
  }
}

void StageExecutor::run() {
  kernelError.clear();
  entry(arena_.get(), params_.get(), reinterpret_cast<int64_t>(this));
  if (!kernelError.empty())
    throw std::runtime_error(kernelError);
}

} // namespace gpipe::runtime

/// The kernel entry point of generated stage code (docs/bundle.md).
extern "C" __attribute__((visibility("default"))) void
gpipe_kernel(int64_t ctx, int64_t id) {
  reinterpret_cast<gpipe::runtime::StageExecutor *>(ctx)->runKernel(id);
}
