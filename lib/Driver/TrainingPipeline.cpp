//===- TrainingPipeline.cpp - From an nn module to compiled stages --------===//
#include "Driver/TrainingPipeline.h"

#include "llvm/Support/Path.h"

#include "Analysis/CostModel.h"
#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/PlanCostModel.h"
#include "Analysis/Planner/ScheduleGenerator.h"
#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"
#include "Transforms/OutlineStages.h"
#include "Transforms/Passes.h"
#include "Transforms/StashPrecision.h"

#include "Pipelines/Pipelines.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/IR/Verifier.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace gpipe;

namespace {

/// Byte sizes of a function's arguments (or results) whose role is one of
/// `roles`.
int64_t roleBytes(func::FuncOp f, bool results, ArrayRef<Role> roles) {
  int64_t bytes = 0;
  unsigned n = results ? f.getNumResults() : f.getNumArguments();
  for (unsigned i = 0; i < n; ++i) {
    Role role = results ? resultRole(f, i) : argRole(f, i);
    if (llvm::is_contained(roles, role))
      bytes += nn::detail::numBytes(results ? f.getResultTypes()[i]
                                            : f.getArgumentTypes()[i]);
  }
  return bytes;
}

std::string formatBytes(double bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (bytes >= (1 << 20))
    os << llvm::format("%.1f MiB", bytes / (1 << 20));
  else
    os << llvm::format("%.1f KiB", bytes / 1024);
  return s;
}

} // namespace

FailureOr<TrainingPipelineResult>
gpipe::compileTrainingPipeline(ModuleOp module,
                               const TrainingPipelineOptions &o,
                               TrainingStop stop, llvm::raw_ostream &os) {
  MLIRContext *context = module.getContext();
  const PartitionOptions &p = o.partition;
  // State tensors per parameter: SGD's momentum buffer, Adam's two moments.
  const AppendOptimizerOptions &opt = o.optimizer;
  int64_t optimizerSlots = opt.optimizer == "sgd" ? (opt.momentum ? 1 : 0) : 2;
  {
    PartitionOptions partition = p;
    partition.optimizerSlots = optimizerSlots;
    PassManager pm(context);
    buildPartitionPipeline(pm, o.loss, partition, o.attention);
    if (failed(pm.run(module)))
      return failure();
  }
  if (stop == TrainingStop::Stages) {
    module.print(os);
    return TrainingPipelineResult{};
  }
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  SmallVector<StageOp> stageOps(forward.front().getOps<StageOp>());
  int64_t k = stageOps.size();
  if (static_cast<int64_t>(o.bundleDevices.size()) != k)
    return module.emitError("internal: ")
           << k << " stages for " << o.bundleDevices.size() << " devices";
  FailureOr<SmallVector<OwningOpRef<ModuleOp>>> outlined =
      outlineStages(module);
  if (failed(outlined))
    return failure();

  // Trainable parameters by name: the stages that train a copy (tied
  // weights), for the buffers and time of their gradient exchange.
  llvm::StringMap<SmallVector<int64_t>> trainedBy;
  for (auto [s, stage] : llvm::enumerate(*outlined))
    for (ParameterOp param : stage->getOps<ParameterOp>())
      if (param.getTrainable())
        trainedBy[param.getSymName()].push_back(s);

  TrainingPipelineResult result;
  auto rankOf = [&](int64_t s) {
    return o.ranks.empty() ? int64_t(0) : o.ranks[s];
  };
  // The network between ranks: the profile's figures (the same for every
  // device; the partitioner already reported a bad profile), else the
  // built-in ones.
  DeviceProfile network = defaultProfile(Device{DeviceKind::Cpu, {0}});
  if (!p.profile.empty()) {
    llvm::Expected<DeviceProfile> read =
        profileFor(p.profile, Device{DeviceKind::Cpu, {0}});
    if (read)
      network = *read;
    else
      llvm::consumeError(read.takeError());
  }

  // The plan this bundle runs, and its cost model.
  PipelinePlan &plan = result.plan;
  for (int64_t s = 0; s < k; ++s)
    plan.stages.push_back({o.bundleDevices[s], rankOf(s)});
  plan.replicas = o.dataParallel;
  plan.microBatches = p.microBatches;
  plan.schedule = parseScheduleKind(p.schedule).value_or(ScheduleKind::GPipe);
  plan.recompute =
      parseRecomputePolicy(p.recompute).value_or(RecomputePolicy::Never);
  // Auto: what the partitioner chose for each stage.
  if (plan.recompute == RecomputePolicy::Auto)
    for (StageOp op : stageOps) {
      auto chosen = op->getAttrOfType<BoolAttr>("gpipe.recomputes");
      plan.autoRecompute.push_back(chosen && chosen.getValue());
    }
  PlanCostModel costModel(plan, network, optimizerSlots);
  bool splitBackward = scheduleKindInfo(plan.schedule).splitsBackward;
  ScheduleRequest request;
  request.kind = plan.schedule;
  request.microBatches = p.microBatches;
  for (int64_t s = 0; s < k; ++s) {
    ModuleOp stage = *(*outlined)[s];
    bool last = s + 1 == k;
    bool recompute = plan.recomputes(s);
    {
      PassManager pm(context);
      SplitForwardBackwardOptions split;
      split.recompute = recompute ? "always" : "never";
      split.lastStage = last;
      buildTrainStagePipeline(pm, split, o.optimizer);
      // A zero-bubble schedule runs the backward in two parts.
      if (splitBackward)
        pm.addPass(createSplitBackwardWeights());
      if (failed(pm.run(stage)))
        return failure();
    }
    if (stop == TrainingStop::Autodiff) {
      stage.print(os);
      os << "\n";
      continue;
    }
    auto fwd = stage.lookupSymbol<func::FuncOp>("forward");
    auto bwd = stage.lookupSymbol<func::FuncOp>(splitBackward ? "backward_input"
                                                              : "backward");
    // Kept per micro-batch: the forward's stash, or (recompute) the
    // received stage input; the data inputs are read again from the batch.
    // A split backward's weight part also reads what its input part leaves
    // it and the received gradients: kept with the stash until it runs.
    // Values the backward only multiplies in bfloat16 are kept in bfloat16
    // (StashPrecision.h).
    int64_t stashBytes = 0;
    for (unsigned i = 0; i < bwd.getNumArguments(); ++i) {
      Role role = argRole(bwd, i);
      if (role != Role::Stash && role != Role::Activation)
        continue;
      int64_t bytes = nn::detail::numBytes(bwd.getArgumentTypes()[i]);
      stashBytes += keptInBf16(bwd, i) ? bf16StashBytes(bytes) : bytes;
    }
    if (splitBackward) {
      auto weight = stage.lookupSymbol<func::FuncOp>("backward_weight");
      for (unsigned i = 0; i < weight.getNumArguments(); ++i)
        if (keptForWeightPart(argRole(weight, i)))
          stashBytes += nn::detail::numBytes(weight.getArgumentTypes()[i]);
    }
    // The bfloat16 copies of the parameters the stage's products read
    // (bf16CopyBytes), which the CPU runtime keeps beside the parameters'
    // blob.
    int64_t bf16Copies = 0;
    {
      llvm::StringMap<SmallVector<Value>> reads;
      stage.walk(
          [&](GetParameterOp get) { reads[get.getName()].push_back(get); });
      for (ParameterOp param : stage.getOps<ParameterOp>())
        if (auto it = reads.find(param.getSymName()); it != reads.end())
          bf16Copies +=
              bf16CopyBytes(it->second, nn::detail::numBytes(param.getType()));
    }
    // One received and one sent message each way; activations the stage
    // only multiplies in bfloat16 come in bfloat16 (receivedInBf16), and
    // what it sends as the partition counted it (LayerTable's
    // crossMessageBytes: the next stage is not lowered yet).
    int64_t inBytes = roleBytes(fwd, false, {Role::Activation});
    int64_t outBytes = roleBytes(fwd, true, {Role::Activation});
    int64_t inMessageBytes = 0;
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i)
      if (argRole(fwd, i) == Role::Activation) {
        int64_t bytes = nn::detail::numBytes(fwd.getArgumentTypes()[i]);
        inMessageBytes +=
            receivedInBf16(fwd, i) ? bf16StashBytes(bytes) : bytes;
      }
    int64_t outMessageBytes = outBytes;
    if (auto sent = stageOps[s]->getAttrOfType<DenseI64ArrayAttr>(
            "gpipe.activation_message_bytes"))
      outMessageBytes = std::min(outBytes, sent[1]);
    int64_t messageBytes =
        inMessageBytes + inBytes + outMessageBytes + outBytes;
    int64_t entryIndex = s;
    {
      PassManager pm(context);
      LowerTrainingStagePipelineOptions lower;
      lower.stage = entryIndex;
      lower.splitBackward = splitBackward;
      buildLowerTrainingStagePipeline(pm, lower);
      if (failed(pm.run(stage)))
        return failure();
    }
    // Each stage holds its own parameters (and constants) in a blob; a
    // phase that shares the forward's arena makes it as large as either.
    int64_t arenas = 0, paramsSize = 0, forwardArena = 0, sharing = 0;
    for (auto f : stage.getOps<func::FuncOp>())
      if (auto size = f->getAttrOfType<IntegerAttr>("gpipe.arena_size")) {
        auto phase = f->getAttrOfType<StringAttr>("gpipe.phase");
        if (f->hasAttr("gpipe.arena_of"))
          sharing = std::max(sharing, size.getInt());
        else if (phase && phase.getValue() == "forward")
          forwardArena = size.getInt();
        else
          arenas += size.getInt();
        paramsSize = std::max(
            paramsSize,
            f->getAttrOfType<IntegerAttr>("gpipe.params_size").getInt());
      }
    arenas += std::max(forwardArena, sharing);
    // A tied weight's gradient exchange (StreamRunner::sumTiedGradients):
    // the summed gradient on the host and one message to each other copy.
    int64_t tiedBytes = 0;
    for (ParameterOp param : stage.getOps<ParameterOp>()) {
      auto it = trainedBy.find(param.getSymName());
      int64_t copies = it == trainedBy.end() ? 0 : it->second.size();
      if (copies > 1) {
        RankedTensorType type = param.getType();
        tiedBytes += copies * type.getNumElements() *
                     std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
      }
    }
    StageOp op = stageOps[s];
    auto limit = op->getAttrOfType<IntegerAttr>("gpipe.memory_limit");
    request.devices.push_back(o.bundleDevices[s]);
    request.ranks.push_back(rankOf(s));
    request.recompute.push_back(recompute);
    request.memory.push_back(
        {arenas + paramsSize + bf16Copies + messageBytes + tiedBytes,
         stashBytes,
         limit ? std::optional<int64_t>(limit.getInt()) : std::nullopt});

    StageReport row;
    row.index = s;
    row.device = o.bundleDevices[s];
    row.recompute = recompute;
    auto layers = op->getAttrOfType<DenseI64ArrayAttr>("gpipe.layers");
    row.firstLayer = layers[0];
    row.endLayer = layers[1];
    row.ops = layers[1] - layers[0];
    row.flops = op->getAttrOfType<IntegerAttr>("gpipe.flops").getInt();
    StageFacts facts;
    facts.forwardKernels =
        op->getAttrOfType<FloatAttr>("gpipe.forward_time").getValueAsDouble();
    facts.backwardKernels =
        op->getAttrOfType<FloatAttr>("gpipe.backward_time").getValueAsDouble();
    if (auto w = op->getAttrOfType<FloatAttr>("gpipe.backward_weight_time"))
      facts.backwardWeightKernels = w.getValueAsDouble();
    facts.transfer =
        op->getAttrOfType<FloatAttr>("gpipe.transfer_time").getValueAsDouble();
    if (auto once =
            op->getAttrOfType<DenseF64ArrayAttr>("gpipe.conversion_time")) {
      facts.forwardConversion = once[0];
      facts.backwardConversion = once[1];
    }
    for (auto p : stage.getOps<ParameterOp>())
      if (p.getTrainable()) {
        row.parameters += p.getType().getNumElements();
        facts.trainableBytes += nn::detail::numBytes(p.getType());
        const SmallVector<int64_t> &tied =
            trainedBy.find(p.getSymName())->second;
        if (tied.size() > 1)
          facts.addTiedWeight(s, tied, nn::detail::numBytes(p.getType()));
      }
    facts.stashBytes = stashBytes;
    facts.messages = messageBytes;
    facts.inBytes = inBytes;
    facts.outBytes = outBytes;
    facts.inMessageBytes = inMessageBytes;
    facts.outMessageBytes = outMessageBytes;
    facts.memoryBandwidth =
        op->getAttrOfType<FloatAttr>("gpipe.memory_bandwidth")
            .getValueAsDouble();
    if (auto cache = op->getAttrOfType<FloatAttr>("gpipe.cache_bytes"))
      facts.cacheBytes = cache.getValueAsDouble();
    if (auto copy = op->getAttrOfType<FloatAttr>("gpipe.cached_copy_bandwidth"))
      facts.cachedCopyBandwidth = copy.getValueAsDouble();
    if (auto cache = op->getAttrOfType<FloatAttr>("gpipe.stash_cache_bytes"))
      facts.stashCacheBytes = cache.getValueAsDouble();
    if (auto copy = op->getAttrOfType<FloatAttr>("gpipe.copy_memory_bandwidth"))
      facts.copyMemoryBandwidth = copy.getValueAsDouble();
    if (auto peak = op->getAttrOfType<IntegerAttr>("gpipe.predicted_memory"))
      facts.footprint = static_cast<double>(peak.getInt());
    if (auto sum = op->getAttrOfType<FloatAttr>("gpipe.gradient_sum_time"))
      facts.gradientSumPass = sum.getValueAsDouble();
    if (auto share = op->getAttrOfType<FloatAttr>("gpipe.product_summed_share"))
      facts.productSummedShare = share.getValueAsDouble();
    if (auto step = op->getAttrOfType<FloatAttr>("gpipe.optimizer_time"))
      facts.optimizerKernel = step.getValueAsDouble();
    if (auto h = op->getAttrOfType<DenseF64ArrayAttr>("gpipe.thread_handoff"))
      facts.handoffs = {h[0], h[1], h[2]};
    row.cost = costModel.stageCost(s, facts);
    result.costs.push_back(row.cost);
    result.report.push_back(row);
  }
  if (stop == TrainingStop::Autodiff)
    return TrainingPipelineResult{};

  // The schedule, proved by its verifier, with each device's exact peak.
  OwningOpRef<ModuleOp> holder = ModuleOp::create(module.getLoc());
  OpBuilder b = OpBuilder::atBlockEnd(holder->getBody());
  ScheduleOp schedule = buildSchedule(b, module.getLoc(), request);
  if (failed(verify(schedule)))
    return failure();
  if (stop == TrainingStop::Schedule) {
    holder->print(os);
    return TrainingPipelineResult{};
  }
  result.prediction = costModel.predict(schedule, result.costs);

  llvm::json::Array streams;
  for (auto stream : schedule.getBody().front().getOps<StreamOp>()) {
    llvm::json::Array instructions;
    for (Operation &op : stream.getBody().front()) {
      llvm::json::Array instr{op.getName().stripDialect().str()};
      if (auto mb = op.getAttrOfType<IntegerAttr>("micro_batch"))
        instr.push_back(mb.getInt());
      if (auto peer = op.getAttrOfType<IntegerAttr>("peer"))
        instr.push_back(peer.getInt());
      // A compute instruction's turn on a device its stream shares.
      if (auto turn = op.getAttrOfType<IntegerAttr>("turn"))
        instr.push_back(turn.getInt());
      instructions.push_back(std::move(instr));
    }
    auto [alive, at] = stream.maxAliveMicroBatches();
    int64_t s = stream.getStage();
    // The predicted step, for gpipe-run --report to draw beside the
    // measured one: [instruction, micro-batch, begin, end] in seconds.
    llvm::json::Array predicted;
    for (const SchedulePrediction::Span &span : result.prediction.spans[s])
      predicted.push_back(
          llvm::json::Array{span.what, span.microBatch, span.begin, span.end});
    // Each op's predicted seconds per micro-batch (Partition's
    // gpipe.op_times), for gpipe-run --profile-ops to set beside its
    // measured ones: [name, forward, backward].
    llvm::json::Array opTimes;
    if (auto times = stageOps[s]->getAttrOfType<ArrayAttr>("gpipe.op_times"))
      for (auto entry : times.getAsRange<ArrayAttr>())
        opTimes.push_back(
            llvm::json::Array{cast<StringAttr>(entry[0]).getValue(),
                              cast<FloatAttr>(entry[1]).getValueAsDouble(),
                              cast<FloatAttr>(entry[2]).getValueAsDouble()});
    result.report[s].peakBytes = stream.peakBytes();
    result.report[s].maxAlive = alive;
    llvm::json::Object entry{
        {"stage", s},
        {"device", stream.getDevice()},
        {"recompute", static_cast<bool>(request.recompute[s])},
        {"max_alive_micro_batches", alive},
        {"predicted_peak_bytes", stream.peakBytes()},
        {"predicted_timeline", std::move(predicted)},
        {"predicted_ops", std::move(opTimes)},
        {"instructions", std::move(instructions)}};
    if (std::optional<uint64_t> group = stream.getDeviceGroup())
      entry["device_group"] = static_cast<int64_t>(*group);
    streams.push_back(std::move(entry));
  }
  result.schedule =
      llvm::json::Object{{"kind", p.schedule},
                         {"micro_batches", p.microBatches},
                         {"predicted_step_seconds", result.prediction.stepTime},
                         {"predicted_bubble", result.prediction.bubble},
                         {"streams", std::move(streams)}};
  // The profile's sgemm rate of one core, for gpipe-run to compare with
  // the machine's when a step is far from its prediction.
  if (network.source != "built-in" && network.cores > 0)
    (*result.schedule.getAsObject())["profile_gflops_per_core"] =
        network.peakFlops / static_cast<double>(network.cores) / 1e9;
  for (auto &m : *outlined)
    result.stages.push_back(std::move(m));
  return result;
}

void gpipe::printStageReport(const TrainingPipelineResult &r,
                             llvm::raw_ostream &os) {
  bool ranks =
      r.plan.replicas > 1 || llvm::any_of(r.report, [](const StageReport &s) {
        return s.cost.rank != 0;
      });
  os << "stage " << (ranks ? "rank " : "")
     << "device   layers        ops      params  MFLOP/mb    fwd ms "
        "   bwd ms  peak memory\n";
  for (const StageReport &s : r.report) {
    std::string layers = "[" + std::to_string(s.firstLayer) + ", " +
                         std::to_string(s.endLayer) + ")";
    os << llvm::format("%-5lld ", static_cast<long long>(s.index));
    if (ranks)
      os << llvm::format("%-4lld ", static_cast<long long>(s.cost.rank));
    os << llvm::format("%-8s %-11s %5lld %11lld %9.1f %9.3f %9.3f %12s\n",
                       s.device.c_str(), layers.c_str(),
                       static_cast<long long>(s.ops),
                       static_cast<long long>(s.parameters),
                       static_cast<double>(s.flops) / 1e6, s.cost.forward * 1e3,
                       s.cost.backward * 1e3,
                       formatBytes(static_cast<double>(s.peakBytes)).c_str());
  }
  if (r.plan.recompute == RecomputePolicy::Auto) {
    // Which stages auto made recompute.
    std::string recomputing, keeping;
    for (const StageReport &s : r.report)
      (s.recompute ? recomputing : keeping) +=
          (s.recompute ? (recomputing.empty() ? "" : ", ")
                       : (keeping.empty() ? "" : ", ")) +
          std::to_string(s.index);
    if (recomputing.empty()) {
      os << "recompute auto: no stage recomputes (every stage's "
            "activations fit its device's memory)\n";
    } else {
      os << "recompute auto: stage(s) " << recomputing
         << " recompute (keeping their activations would not fit the "
            "device's memory)";
      if (!keeping.empty())
        os << "; stage(s) " << keeping << " keep their activations";
      os << "\n";
    }
  }
  if (r.plan.replicas > 1) {
    int64_t perReplica = 1;
    double allReduce = 0;
    for (const StageReport &s : r.report) {
      perReplica = std::max(perReplica, s.cost.rank + 1);
      allReduce = std::max(allReduce, s.cost.allReduce);
    }
    os << llvm::format("data parallel: %lld replicas on %lld ranks (replica "
                       "r of a stage on rank r x %lld + its rank); gradient "
                       "all-reduce %.3f ms per step (largest stage)\n",
                       static_cast<long long>(r.plan.replicas),
                       static_cast<long long>(r.plan.replicas * perReplica),
                       static_cast<long long>(perReplica), allReduce * 1e3);
  }
  PlanCostModel costModel(r.plan, DeviceProfile{}, 0);
  PlanCostModel::FillDrain fillDrain = costModel.fillDrainBubble();
  os << llvm::format("schedule %s, %lld micro-batches: predicted step %.3f "
                     "ms, bubble %.1f%% (fill-drain %s = %.1f%%)\n",
                     toString(r.plan.schedule).str().c_str(),
                     static_cast<long long>(r.plan.microBatches),
                     r.prediction.stepTime * 1e3, r.prediction.bubble * 100,
                     fillDrain.formula.str().c_str(), fillDrain.bubble * 100);
}

std::string gpipe::reportTitle(StringRef modelFile,
                               const TrainingPipelineResult &r) {
  return (llvm::sys::path::filename(modelFile) + ": " +
          std::to_string(r.report.size()) + " stage" +
          (r.report.size() == 1 ? "" : "s") + ", " +
          toString(r.plan.schedule).str() + " schedule, " +
          std::to_string(r.plan.microBatches) + " micro-batch" +
          (r.plan.microBatches == 1 ? "" : "es"))
      .str();
}

std::string gpipe::stageReportHTML(const TrainingPipelineResult &r,
                                   StringRef modelName, StringRef preface) {
  std::string table = preface.str();
  llvm::raw_string_ostream ts(table);
  printStageReport(r, ts);
  return timelineReportHTML(modelName.str(), table,
                            {predictedTimeline(r, "predicted step")});
}

gpipe::Timeline gpipe::predictedTimeline(const TrainingPipelineResult &r,
                                         StringRef title) {
  Timeline t;
  t.title = title.str();
  t.seconds = r.prediction.stepTime;
  for (auto [s, spans] : llvm::enumerate(r.prediction.spans)) {
    const StageReport &stage = r.report[s];
    TimelineRow &row = t.rows.emplace_back();
    bool ranks =
        r.plan.replicas > 1 || llvm::any_of(r.report, [](const StageReport &x) {
          return x.cost.rank != 0;
        });
    row.label = timelineRowLabel(s, stage.device, ranks ? stage.cost.rank : -1);
    t.recompute |= stage.recompute;
    for (const SchedulePrediction::Span &span : spans)
      if (std::string kind = timelineKind(span.what); !kind.empty())
        row.boxes.push_back({kind, span.microBatch, span.begin, span.end});
  }
  return t;
}
