//===- PlanSearch.cpp - The plans a set of cores can run ------------------===//
#include "Driver/PlanSearch.h"

#include "Pipelines/Pipelines.h"

#include "Analysis/Planner/PlanCostModel.h"
#include "Analysis/Planner/ScheduleGenerator.h"
#include "Analysis/Planner/StagePartition.h"
#include "NN/IR/NNOps.h"
#include "Transforms/Passes.h"
#include "Transforms/Schedule.h"
#include "Transforms/SplitForwardBackward.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <set>

using namespace mlir;
using namespace gpipe;

std::string PlanCandidate::flags() const {
  std::string f = "--devices=" + plan.deviceList();
  if (plan.replicas > 1)
    f += " --data-parallel=" + std::to_string(plan.replicas) +
         " --batch-size=" + std::to_string(replicaBatch);
  f += " --micro-batches=" + std::to_string(plan.microBatches) +
       " --schedule=" + toString(plan.schedule).str() +
       " --recompute=" + toString(plan.recompute).str();
  if (memoryPerDevice > 0)
    f += " --memory-per-device=" +
         (memoryPerDevice % (1 << 20) == 0
              ? std::to_string(memoryPerDevice >> 20) + "MiB"
              : std::to_string(memoryPerDevice));
  return f;
}

bool PlanCandidate::sameAs(const PipelinePlan &other) const {
  if (other.numStages() != plan.numStages() ||
      other.microBatches != plan.microBatches ||
      other.replicas != plan.replicas)
    return false;
  for (int64_t s = 0; s < plan.numStages(); ++s)
    if (other.stages[s].device != plan.stages[s].device ||
        other.stages[s].rank != plan.stages[s].rank)
      return false;
  // One stage: the schedules are the same; recompute still differs.
  return (plan.numStages() == 1 || other.schedule == plan.schedule) &&
         other.recompute == plan.recompute;
}

std::vector<int> gpipe::coresOf(const std::vector<Device> &devices) {
  std::set<int> cores;
  for (const Device &d : devices) {
    if (d.kind != DeviceKind::Cpu)
      return {};
    cores.insert(d.ids.begin(), d.ids.end());
  }
  return {cores.begin(), cores.end()};
}

namespace {

/// The cores split into `k` contiguous groups of consecutive cores (sizes
/// differing by at most one), as devices; empty if a group is not a range.
std::vector<Device> splitCores(const std::vector<int> &cores, int64_t k) {
  std::vector<Device> groups;
  int64_t n = cores.size(), begin = 0;
  for (int64_t g = 0; g < k; ++g) {
    int64_t size = n / k + (g < n % k ? 1 : 0);
    Device d{DeviceKind::Cpu, {}};
    for (int64_t i = begin; i < begin + size; ++i) {
      if (i > begin && cores[i] != cores[i - 1] + 1)
        return {};
      d.ids.push_back(cores[i]);
    }
    groups.push_back(d);
    begin += size;
  }
  return groups;
}

/// The stages other than `s` that train a copy of one of its weights (a
/// trained parameter several stages' layers read), and those weights'
/// bytes on it.
void tiedWeights(const LayerTable &table, ArrayRef<int64_t> bounds, int64_t s,
                 StageFacts &facts) {
  for (const LayerTable::SharedParameter &p : table.shared) {
    if (p.trainableBytes == 0)
      continue;
    // The stages holding a reader, in order.
    SmallVector<int64_t> stages;
    for (int64_t layer : p.readers) {
      int64_t of = llvm::upper_bound(bounds, layer) - bounds.begin() - 1;
      if (stages.empty() || stages.back() != of)
        stages.push_back(of);
    }
    if (stages.size() > 1 && llvm::is_contained(stages, s))
      facts.addTiedWeight(s, stages, p.trainableBytes);
  }
}

/// The plan's step over the verified schedule, as the driver predicts a
/// compiled one (the stash approximated by the activations kept).
void predict(PlanCandidate &c, const LayerTable &table,
             ArrayRef<DeviceProfile> profiles, const DeviceProfile &network,
             int64_t optimizerSlots, int64_t rows, MLIRContext *context) {
  PipelinePlan &plan = c.plan;
  StagePartitioner partitioner(table, plan, profiles, rows);
  FailureOr<SmallVector<int64_t>> cuts = partitioner.solve(true);
  if (failed(cuts)) {
    c.fits = false;
    cuts = partitioner.solve(false);
  }
  plan.cuts = *cuts;
  if (plan.recompute == RecomputePolicy::Auto)
    plan.autoRecompute = partitioner.recomputeChoices(plan.cuts);
  int64_t k = plan.numStages(), n = table.size();
  SmallVector<int64_t> bounds{0};
  llvm::append_range(bounds, plan.cuts);
  bounds.push_back(n);
  PlanCostModel model(plan, network, optimizerSlots);
  SmallVector<StageCost> costs;
  ScheduleRequest request;
  request.kind = plan.schedule;
  request.microBatches = plan.microBatches;
  double scale = table.scale(rows);
  for (int64_t s = 0; s < k; ++s) {
    int64_t begin = bounds[s], end = bounds[s + 1];
    StageSlice slice = partitioner.slice(s, begin, end);
    c.memory = std::max(c.memory, slice.memory);
    StageFacts facts;
    facts.forwardKernels = slice.forward;
    facts.backwardKernels = slice.backward;
    facts.backwardWeightKernels = slice.backwardWeight;
    facts.transfer = slice.transfer;
    facts.forwardConversion = slice.forwardConversion;
    facts.backwardConversion = slice.backwardConversion;
    facts.gradientSumPass = partitioner.gradientSumPass(s, begin, end);
    facts.inBytes = table.crossBytes[begin] * scale;
    facts.outBytes = table.crossBytes[end] * scale;
    facts.inMessageBytes = slice.inMessageBytes;
    facts.outMessageBytes = slice.outMessageBytes;
    facts.messages = facts.inMessageBytes + facts.inBytes +
                     facts.outMessageBytes + facts.outBytes;
    facts.trainableBytes = slice.trainableBytes;
    facts.productSummedShare = slice.productSummedShare;
    // With what a split backward's weight part keeps, as the compiled
    // plan counts its stash.
    facts.stashBytes = slice.kept;
    facts.memoryBandwidth = profiles[s].memoryBandwidth;
    facts.cacheBytes = profiles[s].cacheBytes;
    facts.stashCacheBytes = profiles[s].stashCache();
    facts.cachedCopyBandwidth = profiles[s].linkBandwidth;
    facts.copyMemoryBandwidth = profiles[s].copyBandwidth();
    facts.footprint = slice.memory;
    facts.optimizerKernel = profiles[s].kernelSeconds(
        "optimizer", facts.trainableBytes, facts.trainableBytes, false);
    facts.handoffs = profiles[s].handoffs;
    tiedWeights(table, bounds, s, facts);
    costs.push_back(model.stageCost(s, facts));
    request.devices.push_back(plan.stages[s].device);
    request.recompute.push_back(plan.recomputes(s));
  }
  OwningOpRef<ModuleOp> holder = ModuleOp::create(UnknownLoc::get(context));
  OpBuilder b = OpBuilder::atBlockEnd(holder->getBody());
  ScheduleOp schedule = buildSchedule(b, holder->getLoc(), request);
  SchedulePrediction p = model.predict(schedule, costs);
  c.step = p.stepTime;
  c.bubble = p.bubble;
}

/// How many cores of one host the plan's stages keep busy: ranks naming
/// the same cores must run on different hosts (a cluster's ranks, each
/// "cpu:0-7"), so a host holds one rank's cores; ranks naming different
/// cores are taken to share one host (ranks on this machine).
int64_t busyCoresPerHost(const std::vector<std::vector<int>> &ranks) {
  std::set<int> all;
  size_t most = 0, named = 0;
  for (const std::vector<int> &cores : ranks) {
    most = std::max(most, cores.size());
    named += cores.size();
    all.insert(cores.begin(), cores.end());
  }
  return static_cast<int64_t>(all.size() < named ? most : all.size());
}

/// Every plan on `placement` with `replicas` replicas of `replicaBatch`
/// samples: micro-batches dividing it, every schedule kind (one for one
/// stage; with a `layout`, only the interleaving kinds of that layout,
/// whose placement lists the devices over again), recompute where keeping
/// the activations does not fit; appended to `plans`.
void weighPlacement(ArrayRef<StagePlacement> placement,
                    std::optional<StageLayout> layout, int64_t replicas,
                    int64_t replicaBatch, ArrayRef<DeviceProfile> profiles,
                    const LayerTable &table, const PlanSearchSpace &space,
                    const DeviceProfile &network, MLIRContext *context,
                    std::vector<PlanCandidate> &plans) {
  llvm::SmallVector<std::string> keys = deviceKeys(placement);
  for (int64_t m = 1; m <= std::min(replicaBatch, space.maxMicroBatches); ++m) {
    if (replicaBatch % m != 0)
      continue;
    for (const ScheduleKindInfo &info : scheduleKinds()) {
      ScheduleKind kind = info.kind;
      if (placement.size() == 1 && kind != ScheduleKind::GPipe)
        continue; // one stage: the schedules are the same
      if (info.interleaves != layout.has_value() ||
          (layout && info.layout != *layout))
        continue;
      if (info.interleaves && !interleavingError(keys, m, info.layout).empty())
        continue; // the devices are not listed over again
      // Recompute is for memory: weighed where keeping the activations
      // does not fit (its copies saved never repay the forward run again
      // in measurements, docs/pipeline-benchmarks.md), and then only on the
      // stages that need it (auto: as fast as always or faster, and it
      // fits wherever always does).
      bool neverFits = true;
      for (RecomputePolicy recompute :
           {RecomputePolicy::Never, RecomputePolicy::Auto}) {
        if (recompute == RecomputePolicy::Auto && neverFits)
          continue;
        PlanCandidate c;
        c.plan.stages.assign(placement.begin(), placement.end());
        c.plan.replicas = replicas;
        c.plan.microBatches = m;
        c.plan.schedule = kind;
        c.plan.recompute = recompute;
        c.replicaBatch = replicaBatch;
        c.memoryPerDevice = space.memoryPerDevice;
        predict(c, table, profiles, network, space.optimizerSlots,
                replicaBatch / m, context);
        neverFits = c.fits;
        plans.push_back(std::move(c));
      }
    }
  }
}
} // namespace

llvm::Expected<std::vector<PlanCandidate>>
gpipe::searchPlans(const LayerTable &table, const PlanSearchSpace &space,
                   MLIRContext *context) {
  std::vector<PlanCandidate> plans;
  llvm::Expected<DeviceProfile> network =
      profileFor(space.profiles, Device{DeviceKind::Cpu, {0}});
  if (!network)
    return network.takeError();
  int64_t ranks = static_cast<int64_t>(space.rankCores.size());
  int64_t busy = busyCoresPerHost(space.rankCores);
  // Replicas: D dividing the ranks and the batch; replica r runs on ranks
  // r x P .. r x P + P - 1 (P = ranks / D), each rank's cores split alike
  // (the runtime's layout of replicas, docs/distributed.md).
  for (int64_t d = 1; d <= ranks; ++d) {
    if (ranks % d != 0 || space.batch % d != 0)
      continue;
    int64_t perReplica = ranks / d, replicaBatch = space.batch / d;
    // A replica's stages name the cores of replica 0's: ranks that would
    // run one replica's stage on other cores cannot hold one.
    bool alike = true;
    for (int64_t r = perReplica; r < ranks; ++r)
      alike &= space.rankCores[r] == space.rankCores[r % perReplica];
    if (!alike)
      continue;
    size_t fewest = space.rankCores.front().size();
    for (int64_t r = 0; r < perReplica; ++r)
      fewest = std::min(fewest, space.rankCores[r].size());
    for (int64_t k = 1; k <= static_cast<int64_t>(fewest); ++k) {
      if (perReplica * k > std::max<int64_t>(1, table.size()))
        break;
      std::vector<StagePlacement> placement;
      SmallVector<DeviceProfile, 2> profiles;
      for (int64_t r = 0; r < perReplica; ++r) {
        std::vector<Device> groups = splitCores(space.rankCores[r], k);
        if (groups.empty())
          break;
        for (const Device &g : groups) {
          llvm::Expected<DeviceProfile> p = profileFor(space.profiles, g);
          if (!p)
            return p.takeError();
          if (space.memoryPerDevice > 0)
            setDeviceMemory(*p, space.memoryPerDevice);
          profiles.push_back(*p);
          placement.push_back({g.str(), r});
        }
      }
      if (static_cast<int64_t>(placement.size()) != perReplica * k)
        continue; // a rank's cores are not ranges of k groups
      shareHost(profiles, busy);
      weighPlacement(placement, std::nullopt, d, replicaBatch, profiles, table,
                     space, *network, context, plans);
      // Interleaved: the same devices listed twice, looped (Megatron's) or
      // forth and back (ZB-V's), two stages on each in turns, where the
      // model has the layers; the two share the device's caches
      // (shareDevice) and its memory.
      if (placement.size() >= 2 &&
          2 * static_cast<int64_t>(placement.size()) <= table.size())
        for (StageLayout layout : {StageLayout::Looped, StageLayout::V}) {
          std::vector<StagePlacement> twice = placement;
          SmallVector<DeviceProfile, 4> halves(profiles.begin(),
                                               profiles.end());
          if (layout == StageLayout::Looped) {
            twice.insert(twice.end(), placement.begin(), placement.end());
            halves.append(profiles.begin(), profiles.end());
          } else {
            twice.insert(twice.end(), placement.rbegin(), placement.rend());
            halves.append(profiles.rbegin(), profiles.rend());
          }
          shareDevice(halves, deviceKeys(twice));
          // The search checks no schedule: each stage plans within half.
          for (DeviceProfile &p : halves)
            p.memoryCapacity /= 2;
          weighPlacement(twice, layout, d, replicaBatch, halves, table, space,
                         *network, context, plans);
        }
    }
  }
  // Fastest first among those that fit; ties keep the simpler plan (fewer
  // stages, fewer micro-batches, GPipe, no recompute: the order made).
  std::stable_sort(plans.begin(), plans.end(),
                   [](const PlanCandidate &a, const PlanCandidate &b) {
                     if (a.fits != b.fits)
                       return a.fits;
                     return a.step < b.step * (1 - 1e-9);
                   });
  return plans;
}

const PlanCandidate *
gpipe::bestOneStage(const std::vector<PlanCandidate> &plans) {
  for (const PlanCandidate &c : plans)
    if (c.plan.numStages() == 1)
      return &c;
  return nullptr;
}

void gpipe::printPlans(const std::vector<PlanCandidate> &plans, int64_t batch,
                       const PipelinePlan *compiled, llvm::raw_ostream &os) {
  os << "plans weighed for a batch of " << batch
     << " (predicted; * the fastest, = the plan compiled):\n"
     << "   stages replicas devices              M schedule recompute    "
        "step ms  samples/s  bubble  memory (largest stage)\n";
  for (const PlanCandidate &c : plans) {
    std::string devices = c.plan.deviceList();
    char mark = &c == &plans.front() && c.fits ? '*' : ' ';
    if (compiled && c.sameAs(*compiled))
      mark = '=';
    os << llvm::format(
        "%c  %6lld %8lld %-18s %3lld %-8s %-9s %10.4g %10.0f %6.1f%%  %.1f "
        "%s%s\n",
        mark, static_cast<long long>(c.plan.numStages()),
        static_cast<long long>(c.plan.replicas), devices.c_str(),
        static_cast<long long>(c.plan.microBatches),
        toString(c.plan.schedule).str().c_str(),
        toString(c.plan.recompute).str().c_str(), c.step * 1e3,
        c.step > 0 ? static_cast<double>(batch) / c.step : 0.0, c.bubble * 100,
        c.memory >= (1 << 20) ? c.memory / (1 << 20) : c.memory / 1024,
        c.memory >= (1 << 20) ? static_cast<const char *>("MiB") : "KiB",
        c.fits ? "" : " (does not fit)");
  }
}

void gpipe::printPlanComparison(const PipelinePlan &compiled, double step,
                                const std::vector<PlanCandidate> &plans,
                                llvm::raw_ostream &os) {
  if (plans.empty() || step <= 0)
    return;
  auto ratio = [&](double other) {
    std::string s;
    llvm::raw_string_ostream rs(s);
    if (step <= other)
      rs << llvm::format("this plan is predicted %.2fx as fast", other / step);
    else if (step / other < 1.005) // "1.00x slower" says nothing
      rs << "this plan is predicted as fast (within 0.5%)";
    else
      rs << llvm::format("this plan is predicted %.2fx slower", step / other);
    return s;
  };
  const PlanCandidate *one = bestOneStage(plans);
  if (one && !one->sameAs(compiled) && one->plan.replicas > 1)
    os << llvm::format("one stage on each rank's cores, %lld replicas (%s, "
                       "%lld micro-batch%s): %.4g ms a step predicted; ",
                       static_cast<long long>(one->plan.replicas),
                       one->plan.stages[0].device.c_str(),
                       static_cast<long long>(one->plan.microBatches),
                       one->plan.microBatches == 1 ? "" : "es", one->step * 1e3)
       << ratio(one->step) << "\n";
  else if (one && !one->sameAs(compiled))
    os << llvm::format("one stage on all the cores (%s, %lld micro-batch%s): "
                       "%.4g ms a step predicted; ",
                       one->plan.stages[0].device.c_str(),
                       static_cast<long long>(one->plan.microBatches),
                       one->plan.microBatches == 1 ? "" : "es", one->step * 1e3)
       << ratio(one->step) << "\n";
  const PlanCandidate &best = plans.front();
  if (!best.fits)
    return;
  if (best.sameAs(compiled)) {
    os << "this is the fastest of the " << plans.size()
       << " plans weighed for these cores (--emit=plans lists them)\n";
    return;
  }
  if (&best == one) {
    os << "it is the fastest plan found for these cores (--plan=auto "
          "compiles it: "
       << best.flags() << "; --emit=plans lists the " << plans.size()
       << " plans weighed)\n";
    return;
  }
  os << "fastest plan found for these cores: " << best.flags()
     << llvm::format(", %.4g ms a step predicted; ", best.step * 1e3)
     << ratio(best.step) << " (--plan=auto compiles it; --emit=plans lists "
     << "the " << plans.size() << " plans weighed)\n";
}

llvm::Expected<std::vector<PlanCandidate>>
gpipe::weighPlans(ModuleOp module, const AppendLossOptions &loss,
                  llvm::StringRef costTable, const PlanSearchSpace &space) {
  MLIRContext *context = module.getContext();
  OwningOpRef<ModuleOp> copy(module.clone());
  PassManager pm(context);
  // What buildPartitionPipeline cuts: the same layers.
  buildTrainingModelPipeline(pm, loss);
  if (failed(pm.run(*copy)))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the loss could not be appended");
  auto forward = copy->lookupSymbol<func::FuncOp>("forward");
  std::optional<CostTable> table;
  if (!costTable.empty()) {
    llvm::Expected<CostTable> read =
        readCostTable(costTable, LayerTable::microBatchRows(forward));
    if (!read)
      return read.takeError();
    table = std::move(*read);
  }
  LayerTable layers = LayerTable::build(forward, space.optimizerSlots,
                                        table ? &*table : nullptr);
  layers.setStash(stashByLayer(*copy, layers));
  return searchPlans(layers, space, context);
}
