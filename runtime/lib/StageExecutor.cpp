#include "gpipe/runtime/StageExecutor.h"

#include "Clock.h"

#include "gpipe/runtime/ParallelFor.h"

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

StageExecutor::StageExecutor(const Bundle &bundle, StageSpec &spec)
    : spec(spec), engine(std::make_unique<Engine>()) {
  ParameterBlob &blob = spec.parameters;
  if (static_cast<int64_t>(blob.data.size()) != blob.size)
    throw BundleError(bundle.path + ": " + blob.file +
                      ": the parameters were not loaded");
  params_ = allocate(blob.size);
  std::memcpy(params_.get(), blob.data.data(), blob.size);
  std::string().swap(blob.data);
  paramsPtr = params_.get();
  allocated = blob.size;
  load(bundle);
}

void StageExecutor::load(const Bundle &bundle) {
  std::string libraryPath = bundle.partPath(spec.library);
  library = dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw BundleError(bundle.path + ": " + spec.library +
                      ": cannot load the stage library: " + dlerror());
  phases.resize(spec.phases.size());
  for (size_t i = 0; i < spec.phases.size(); ++i) {
    const PhaseSpec &ps = spec.phases[i];
    Phase &phase = phases[i];
    phase.arena = allocate(ps.arenaSize);
    allocated += ps.arenaSize;
    phase.entry = reinterpret_cast<Entry>(dlsym(library, ps.entry.c_str()));
    if (!phase.entry)
      throw BundleError(bundle.path + ": " + spec.library +
                        ": no entry point '" + ps.entry + "'");
    phase.context = std::make_unique<Context>(Context{this, i});
    KernelMemory memory{phase.arena.get(), paramsPtr, bundle.mode == "infer",
                        &updateState, &random};
    for (const KernelSpec &k : ps.kernels) {
      if (k.id != static_cast<int64_t>(phase.kernels.size()))
        throw BundleError(bundle.path + ": manifest.json: kernel ids are not "
                                        "consecutive");
      phase.kernels.push_back(createKernel(k, memory, engine->engine));
    }
  }
}

StageExecutor::~StageExecutor() {
  phases.clear();
  if (library)
    dlclose(library);
}

size_t StageExecutor::phaseIndex(const std::string &role) const {
  for (size_t i = 0; i < spec.phases.size(); ++i)
    if (spec.phases[i].role == role)
      return i;
  throw BundleError("the stage has no " + role + " phase");
}

void StageExecutor::runKernel(size_t phase, int64_t id) noexcept {
  if (!kernelError.empty())
    return;
  std::vector<std::unique_ptr<Kernel>> &kernels = phases[phase].kernels;
  if (id < 0 || id >= static_cast<int64_t>(kernels.size())) {
    kernelError = "the stage code called unknown kernel " + std::to_string(id);
    return;
  }
  try {
    if (kernelTrace || profiling) {
      double begin = steadySeconds();
      kernels[id]->run(engine->stream);
      double end = steadySeconds();
      if (kernelTrace)
        kernelTrace->push_back(
            {&spec.phases[phase].kernels[id].kind, begin, end});
      if (profiling)
        kernelTotals[phase][id] += end - begin;
    } else {
      kernels[id]->run(engine->stream);
    }
  } catch (const std::exception &e) {
    kernelError = "kernel " + std::to_string(id) + " (" +
                  spec.phases[phase].kernels[id].kind + ") failed: " + e.what();
  }
}

void StageExecutor::setKernelProfile(bool enable) {
  profiling = enable;
  kernelTotals.assign(phases.size(), {});
  for (size_t i = 0; i < phases.size(); ++i)
    kernelTotals[i].assign(phases[i].kernels.size(), 0.0);
}

void StageExecutor::run(size_t phase) {
  kernelError.clear();
  Phase &p = phases.at(phase);
  p.entry(p.arena.get(), paramsPtr, reinterpret_cast<int64_t>(p.context.get()));
  if (!kernelError.empty())
    throw std::runtime_error(kernelError);
}

void StageExecutor::parallelFor(size_t phase, LoopBody body,
                                int64_t extent) noexcept {
  if (!kernelError.empty() || extent <= 0)
    return;
  char *arena = phases[phase].arena.get();
  // The compiler outlined only loops worth splitting: one outer iteration
  // per thread at least.
  parallelChunks(extent, 1, [&](int64_t begin, int64_t end) {
    body(arena, paramsPtr, begin, end);
  });
}

void gpipeParallelFor(int64_t ctx, LoopBody body, int64_t extent) {
  auto *context = reinterpret_cast<StageExecutor::Context *>(ctx);
  context->executor->parallelFor(context->phase, body, extent);
}

void gpipeKernel(int64_t ctx, int64_t id) {
  auto *context = reinterpret_cast<StageExecutor::Context *>(ctx);
  context->executor->runKernel(context->phase, id);
}

} // namespace gpipe::runtime

/// The kernel entry point of generated stage code (docs/bundle.md).
extern "C" __attribute__((visibility("default"))) void
gpipe_kernel(int64_t ctx, int64_t id) {
  gpipe::runtime::gpipeKernel(ctx, id);
}

/// The parallel loop entry point of generated stage code (docs/bundle.md).
extern "C" __attribute__((visibility("default"))) void
gpipe_parallel_for(int64_t ctx, gpipe::runtime::LoopBody body, int64_t extent) {
  gpipe::runtime::gpipeParallelFor(ctx, body, extent);
}
