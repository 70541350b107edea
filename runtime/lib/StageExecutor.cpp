#include "StageExecutor.h"

#include "Clock.h"
#include "ParallelFor.h"

namespace gpipe::runtime {

StageExecutor::StageExecutor(const Bundle &bundle, StageSpec &spec,
                             std::unique_ptr<DeviceBackend> device)
    : spec(spec), device_(std::move(device)) {
  const ParameterBlob &blob = spec.parameters;
  params_ = device_->allocate(blob.size);
  // Piece by piece from the file (checked again: it may have changed
  // since loadBundle read it).
  readParameters(bundle, blob,
                 [&](int64_t offset, const char *bytes, int64_t size) {
                   device_->copyToDevice(params_.get() + offset, bytes, size);
                 });
  allocated = blob.size;
  load(bundle);
}

void StageExecutor::load(const Bundle &bundle) {
  code = device_->loadCode(bundle, spec);
  phases.resize(spec.phases.size());
  // An arena of its own for each phase that has one (as large as the
  // phases sharing it need), then those phases point into it.
  for (size_t i = 0; i < spec.phases.size(); ++i) {
    if (!spec.phases[i].arenaOf.empty())
      continue;
    int64_t size = spec.arenaBytes(i);
    phases[i].own = device_->allocate(size);
    phases[i].arena = phases[i].own.get();
    allocated += size;
  }
  for (size_t i = 0; i < spec.phases.size(); ++i)
    if (!spec.phases[i].arenaOf.empty())
      phases[i].arena = phases[phaseIndex(spec.phases[i].arenaOf)].arena;
  for (size_t i = 0; i < spec.phases.size(); ++i) {
    const PhaseSpec &ps = spec.phases[i];
    Phase &phase = phases[i];
    phase.entry = code->entry(ps.entry);
    if (!phase.entry)
      throw BundleError(bundle.path + ": " + spec.library +
                        ": no entry point '" + ps.entry + "'");
    phase.context = std::make_unique<Context>(Context{this, i});
    KernelMemory memory{phase.arena,  params_.get(), bundle.mode == "infer",
                        &updateState, &random,       &paramsVersion};
    for (const KernelSpec &k : ps.kernels) {
      if (k.id != static_cast<int64_t>(phase.kernels.size()))
        throw BundleError(bundle.path + ": manifest.json: kernel ids are not "
                                        "consecutive");
      phase.kernels.push_back(device_->createKernel(k, memory));
    }
  }
}

StageExecutor::~StageExecutor() {
  // Kernels and arenas go before the code and the device they came from.
  phases.clear();
  code.reset();
}

size_t StageExecutor::phaseIndex(const std::string &role) const {
  for (size_t i = 0; i < spec.phases.size(); ++i)
    if (spec.phases[i].role == role)
      return i;
  throw BundleError("the stage has no " + role + " phase");
}

bool StageExecutor::retarget(size_t phase, int64_t id, char *target) {
  Phase &p = phases.at(phase);
  const PhaseSpec &ps = spec.phases.at(phase);
  if (id < 0 || id >= static_cast<int64_t>(ps.kernels.size()) ||
      ps.kernels[id].results.size() != 1)
    return false;
  auto over = std::make_unique<KernelSpec>(ps.kernels[id]);
  over->results[0].space = "target";
  over->results[0].offset = 0;
  auto into = std::make_unique<KernelSpec>(*over);
  into->numbers["accumulate"] = {1.0};
  if (!device_->canAccumulate(*into))
    return false;
  KernelMemory memory{p.arena,      params_.get(), false,
                      &updateState, &random,       &paramsVersion};
  memory.target = target;
  Phase::Retargeted r;
  r.overwrite = device_->createKernel(*over, memory);
  r.add = device_->createKernel(*into, memory);
  r.over = std::move(over);
  r.into = std::move(into);
  p.retargeted[id] = std::move(r);
  return true;
}

void StageExecutor::runKernel(size_t phase, int64_t id) noexcept {
  if (!kernelError.empty())
    return;
  Phase &p = phases[phase];
  std::vector<std::unique_ptr<Kernel>> &kernels = p.kernels;
  if (id < 0 || id >= static_cast<int64_t>(kernels.size())) {
    kernelError = "the stage code called unknown kernel " + std::to_string(id);
    return;
  }
  Kernel *kernel = kernels[id].get();
  if (!p.retargeted.empty())
    if (auto found = p.retargeted.find(id); found != p.retargeted.end())
      kernel =
          (p.accumulate ? found->second.add : found->second.overwrite).get();
  try {
    if (kernelTrace || profiling) {
      // Marks in the device's queue: a GPU's kernel times, read when the
      // phase is done, without waiting in between.
      int64_t begin = device_->mark();
      kernel->run();
      timedRuns.push_back({id, begin, device_->mark(), false});
    } else {
      kernel->run();
    }
  } catch (const std::exception &e) {
    kernelError = "kernel " + std::to_string(id) + " (" +
                  spec.phases[phase].kernels[id].kind + ") failed: " + e.what();
  }
}

void StageExecutor::markLoop(size_t phase, int64_t id, int64_t end) noexcept {
  if (!(kernelTrace || profiling) || !kernelError.empty())
    return;
  if (id < 0 || id >= static_cast<int64_t>(spec.phases[phase].loops.size())) {
    kernelError = "the stage code marked unknown loop " + std::to_string(id);
    return;
  }
  if (!end) {
    loopBegin = device_->mark();
    return;
  }
  try {
    timedRuns.push_back({id, loopBegin, device_->mark(), true});
  } catch (const std::exception &e) {
    kernelError =
        std::string("cannot time loop ") + std::to_string(id) + ": " + e.what();
  }
}

void StageExecutor::setKernelProfile(bool enable) {
  profiling = enable;
  kernelTotals.assign(phases.size(), {});
  loopTotals.assign(phases.size(), {});
  for (size_t i = 0; i < phases.size(); ++i) {
    kernelTotals[i].assign(phases[i].kernels.size(), 0.0);
    loopTotals[i].assign(spec.phases[i].loops.size(), 0.0);
  }
}

void StageExecutor::run(size_t phase) {
  kernelError.clear();
  Phase &p = phases.at(phase);
  bool timed = kernelTrace || profiling;
  if (timed) {
    timedRuns.clear();
    device_->beginMarks();
  }
  p.entry(p.arena, params_.get(), reinterpret_cast<int64_t>(p.context.get()));
  // Forwards and backwards (either part of a split one) read the
  // parameters; any other phase (the optimizer's) may write them.
  const std::string &role = spec.phases[phase].role;
  if (role != "forward" && role != "backward" && role != "backward_input" &&
      role != "backward_weight")
    ++paramsVersion;
  if (!kernelError.empty())
    throw std::runtime_error(kernelError);
  // A phase is done when its work on the device is (a GPU runs it after
  // the entry has queued it): its time and its errors are its own.
  device_->synchronize();
  if (!timed)
    return;
  static const std::string loopKind = "loop";
  const PhaseSpec &ps = spec.phases[phase];
  for (const TimedRun &r : timedRuns) {
    double begin = device_->markSeconds(r.begin);
    double end = device_->markSeconds(r.end);
    if (kernelTrace) {
      if (r.loop)
        kernelTrace->push_back(
            {&ps.loops[r.kernel].op, &loopKind, &ps.role, begin, end});
      else
        kernelTrace->push_back({&ps.kernels[r.kernel].op,
                                &ps.kernels[r.kernel].kind, &ps.role, begin,
                                end});
    }
    if (profiling)
      (r.loop ? loopTotals : kernelTotals)[phase][r.kernel] += end - begin;
  }
}

void StageExecutor::parallelFor(size_t phase, LoopBody body,
                                int64_t extent) noexcept {
  if (!kernelError.empty() || extent <= 0)
    return;
  char *arena = phases[phase].arena;
  // The compiler outlined only loops worth splitting: one outer iteration
  // per thread at least.
  parallelChunks(extent, 1, [&](int64_t begin, int64_t end) {
    body(arena, params_.get(), begin, end);
  });
}

void gpipeParallelFor(int64_t ctx, LoopBody body, int64_t extent) {
  auto *context = reinterpret_cast<StageExecutor::Context *>(ctx);
  context->executor->parallelFor(context->phase, body, extent);
}

void StageExecutor::launch(const KernelLaunch &launch) noexcept {
  if (!kernelError.empty())
    return;
  try {
    code->launch(launch);
  } catch (const std::exception &e) {
    kernelError =
        "GPU kernel " + std::to_string(launch.kernel) + " failed: " + e.what();
  }
}

void gpipeCudaLaunch(int64_t ctx, const KernelLaunch &launch) {
  auto *context = reinterpret_cast<StageExecutor::Context *>(ctx);
  context->executor->launch(launch);
}

void gpipeKernel(int64_t ctx, int64_t id) {
  auto *context = reinterpret_cast<StageExecutor::Context *>(ctx);
  context->executor->runKernel(context->phase, id);
}

void gpipeLoop(int64_t ctx, int64_t id, int64_t end) {
  auto *context = reinterpret_cast<StageExecutor::Context *>(ctx);
  context->executor->markLoop(context->phase, id, end);
}

} // namespace gpipe::runtime

/// The kernel entry point of generated stage code (docs/bundle.md).
extern "C" __attribute__((visibility("default"))) void
gpipe_kernel(int64_t ctx, int64_t id) {
  gpipe::runtime::gpipeKernel(ctx, id);
}

/// Generated code calls this before (`end` 0) and after (1) each of its
/// generated loops (docs/bundle.md): timed while profiling or tracing.
extern "C" __attribute__((visibility("default"))) void
gpipe_loop(int64_t ctx, int64_t id, int64_t end) {
  gpipe::runtime::gpipeLoop(ctx, id, end);
}

/// The parallel loop entry point of generated stage code (docs/bundle.md).
extern "C" __attribute__((visibility("default"))) void
gpipe_parallel_for(int64_t ctx, gpipe::runtime::LoopBody body, int64_t extent) {
  gpipe::runtime::gpipeParallelFor(ctx, body, extent);
}

/// The GPU kernel launch entry point of generated host code of CUDA stages
/// (docs/cuda.md): every argument an int64, `arguments` the address of
/// `count` kernel arguments widened to 64 bits.
extern "C" __attribute__((visibility("default"))) void
gpipe_cuda_launch(int64_t ctx, int64_t kernel, int64_t gridX, int64_t gridY,
                  int64_t gridZ, int64_t blockX, int64_t blockY, int64_t blockZ,
                  int64_t arguments, int64_t count) {
  gpipe::runtime::KernelLaunch launch;
  launch.kernel = kernel;
  launch.grid[0] = gridX;
  launch.grid[1] = gridY;
  launch.grid[2] = gridZ;
  launch.block[0] = blockX;
  launch.block[1] = blockY;
  launch.block[2] = blockZ;
  launch.arguments = reinterpret_cast<int64_t *>(arguments);
  launch.count = count;
  gpipe::runtime::gpipeCudaLaunch(ctx, launch);
}
