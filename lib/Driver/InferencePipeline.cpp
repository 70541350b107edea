//===- InferencePipeline.cpp - From nn to pipelined inference -------------===//
#include "Driver/InferencePipeline.h"

#include "Analysis/CostModel.h"
#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"
#include "Pipelines/Pipelines.h"
#include "Transforms/OutlineStages.h"
#include "Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"

#include <algorithm>

using namespace mlir;

namespace gpipe {

double InferencePipelineResult::interval() const {
  double slowest = 0;
  for (const InferenceStageReport &s : report)
    slowest = std::max(slowest, s.busy());
  return slowest;
}

double InferencePipelineResult::latency() const {
  double sum = 0;
  for (const InferenceStageReport &s : report)
    sum += s.busy();
  return sum;
}

double InferencePipelineResult::streamSeconds(int64_t chunks) const {
  if (chunks < 1)
    return 0;
  return latency() + static_cast<double>(chunks - 1) * interval();
}

namespace {

PartitionOptions partitionOptions(const InferencePipelineOptions &o,
                                  const std::string &devices) {
  PartitionOptions p;
  p.deviceList = devices;
  p.stages = o.stages;
  p.profile = o.profile;
  p.costTable = o.costTable;
  p.memoryPerDevice = o.memoryPerDevice;
  p.optimizerSlots = 0; // StagePartitioner's inference memory counts on it
  p.inference = true;
  return p;
}

double attr(Operation *op, StringRef name) {
  auto a = op->getAttrOfType<FloatAttr>(name);
  return a ? a.getValueAsDouble() : 0.0;
}

} // namespace

std::optional<double> predictOneStage(ModuleOp rewritten,
                                      const std::string &device,
                                      const InferencePipelineOptions &o) {
  OwningOpRef<ModuleOp> whole = rewritten.clone();
  PassManager pm(rewritten.getContext());
  PartitionOptions p = partitionOptions(o, device);
  p.stages = "auto"; // one stage: no cut
  pm.addPass(createPartition(p));
  if (failed(pm.run(*whole)))
    return std::nullopt;
  auto forward = whole->lookupSymbol<func::FuncOp>("forward");
  for (StageOp stage : forward.front().getOps<StageOp>())
    return attr(stage, "gpipe.forward_time") +
           attr(stage, "gpipe.transfer_time");
  return std::nullopt;
}

FailureOr<InferencePipelineResult>
compileInferencePipeline(ModuleOp module, const InferencePipelineOptions &o) {
  MLIRContext *context = module.getContext();
  {
    PassManager pm(context);
    buildInferenceModelPipeline(pm, o.fuseAttention);
    if (failed(pm.run(module)))
      return failure();
  }
  InferencePipelineResult result;
  // The same rewritten model as one stage on all the cores, for the
  // comparison (before the cut consumes it).
  if (o.oneStageDevice) {
    result.oneStage = predictOneStage(module, *o.oneStageDevice, o);
    result.oneStageDevice = *o.oneStageDevice;
  }
  {
    PassManager pm(context);
    pm.addPass(createPartition(partitionOptions(o, o.devices)));
    if (failed(pm.run(module)))
      return failure();
  }
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  SmallVector<StageOp> stageOps(forward.front().getOps<StageOp>());
  for (StageOp op : stageOps) {
    InferenceStageReport row;
    row.index = static_cast<int64_t>(op.getIndex());
    row.device = op.getDevice().str();
    auto layers = op->getAttrOfType<DenseI64ArrayAttr>("gpipe.layers");
    row.firstLayer = layers[0];
    row.endLayer = layers[1];
    row.flops = op->getAttrOfType<IntegerAttr>("gpipe.flops").getInt();
    row.forward = attr(op, "gpipe.forward_time");
    row.transfer = attr(op, "gpipe.transfer_time");
    if (auto m = op->getAttrOfType<IntegerAttr>("gpipe.predicted_memory"))
      row.memoryBytes = m.getInt();
    result.report.push_back(row);
  }
  FailureOr<SmallVector<OwningOpRef<ModuleOp>>> outlined =
      outlineStages(module);
  if (failed(outlined))
    return failure();
  // Stages on MPI ranks: the rank in the device's name, and each message
  // that crosses ranks at the network's latency and bandwidth (once sent,
  // once received).
  if (!o.ranks.empty()) {
    DeviceProfile network = defaultProfile(Device{DeviceKind::Cpu, {0}});
    if (!o.profile.empty()) {
      llvm::Expected<DeviceProfile> read =
          profileFor(o.profile, Device{DeviceKind::Cpu, {0}});
      if (read)
        network = *read;
      else
        llvm::consumeError(read.takeError());
    }
    auto activationBytes = [](func::FuncOp f, bool results) {
      int64_t bytes = 0;
      unsigned n = results ? f.getNumResults() : f.getNumArguments();
      for (unsigned i = 0; i < n; ++i) {
        auto role = results ? f.getResultAttrOfType<RoleAttr>(i, kRoleAttrName)
                            : f.getArgAttrOfType<RoleAttr>(i, kRoleAttrName);
        if (role && role.getValue() == Role::Activation)
          bytes += nn::detail::numBytes(results ? f.getResultTypes()[i]
                                                : f.getArgumentTypes()[i]);
      }
      return bytes;
    };
    for (auto [s, row] : llvm::enumerate(result.report)) {
      row.device = "r" + std::to_string(o.ranks[s]) + ":" + row.device;
      auto fwd = (*outlined)[s]->lookupSymbol<func::FuncOp>("forward");
      if (s > 0 && o.ranks[s - 1] != o.ranks[s])
        row.transfer += network.networkLatency +
                        activationBytes(fwd, false) / network.networkBandwidth;
      if (s + 1 < result.report.size() && o.ranks[s + 1] != o.ranks[s])
        row.transfer += network.networkLatency +
                        activationBytes(fwd, true) / network.networkBandwidth;
    }
  }
  // A micro-batch's rows: the first dimension of the first stage's first
  // data input.
  if (auto fwd = (*outlined).front()->lookupSymbol<func::FuncOp>("forward"))
    if (fwd.getNumArguments() > 0)
      if (auto t = dyn_cast<RankedTensorType>(fwd.getArgumentTypes()[0]);
          t && t.getRank() > 0)
        result.rows = t.getDimSize(0);
  for (auto [s, stage] : llvm::enumerate(*outlined)) {
    for (auto p : stage->getOps<ParameterOp>())
      result.report[s].parameters += p.getType().getNumElements();
    PassManager pm(context);
    buildLowerInferenceStagePipeline(pm, static_cast<int64_t>(s));
    if (failed(pm.run(*stage)))
      return failure();
    result.stages.push_back(std::move(stage));
  }
  return result;
}

std::vector<InferencePlan>
weighInferencePlans(ModuleOp imported, const std::vector<int> &cores,
                    const InferencePipelineOptions &o) {
  std::vector<InferencePlan> plans;
  if (cores.empty())
    return plans;
  MLIRContext *context = imported.getContext();
  // A plan that does not fit (or has more stages than layers) is said in
  // its row, not as an error.
  ScopedDiagnosticHandler quiet(context,
                                [](Diagnostic &) { return success(); });
  OwningOpRef<ModuleOp> rewritten = imported.clone();
  {
    PassManager pm(context);
    buildInferenceModelPipeline(pm, o.fuseAttention);
    if (failed(pm.run(*rewritten)))
      return plans;
  }
  auto group = [&](size_t begin, size_t end) {
    std::string text = "cpu:" + std::to_string(cores[begin]);
    bool contiguous =
        cores[end - 1] - cores[begin] == static_cast<int>(end - begin - 1);
    if (end - begin == 1)
      return text;
    if (contiguous)
      return text + "-" + std::to_string(cores[end - 1]);
    for (size_t i = begin + 1; i < end; ++i)
      text += "," + std::to_string(cores[i]);
    return text;
  };
  size_t n = cores.size();
  for (size_t k = 1; k <= n; ++k) {
    if (n % k != 0)
      continue;
    InferencePlan plan;
    plan.stages = static_cast<int64_t>(k);
    size_t per = n / k;
    for (size_t s = 0; s < k; ++s)
      plan.devices += (s ? "," : "") + group(s * per, (s + 1) * per);
    OwningOpRef<ModuleOp> cut = rewritten->clone();
    PassManager pm(context);
    PartitionOptions p = partitionOptions(o, plan.devices);
    p.stages = "auto";
    pm.addPass(createPartition(p));
    if (failed(pm.run(*cut))) {
      plan.fits = false;
    } else {
      auto forward = cut->lookupSymbol<func::FuncOp>("forward");
      for (StageOp stage : forward.front().getOps<StageOp>()) {
        double busy = attr(stage, "gpipe.forward_time") +
                      attr(stage, "gpipe.transfer_time");
        plan.interval = std::max(plan.interval, busy);
        plan.latency += busy;
      }
    }
    plans.push_back(plan);
  }
  std::stable_sort(plans.begin(), plans.end(),
                   [](const InferencePlan &a, const InferencePlan &b) {
                     if (a.fits != b.fits)
                       return a.fits;
                     return a.interval < b.interval;
                   });
  return plans;
}

void printInferencePlans(const std::vector<InferencePlan> &plans, int64_t rows,
                         llvm::raw_ostream &os) {
  os << "plans for pipelined inference, micro-batches of " << rows
     << " rows streaming (fastest first):\n";
  os << "  stages  devices              interval ms       rows/s   "
        "latency ms\n";
  for (auto [i, p] : llvm::enumerate(plans)) {
    const char *mark = i == 0 && p.fits ? "*" : " ";
    os << llvm::format("%s %6lld  %-20s", mark,
                       static_cast<long long>(p.stages), p.devices.c_str());
    if (!p.fits) {
      os << "  does not fit (or has more stages than layers)\n";
      continue;
    }
    os << llvm::format(" %11.4g %12.0f %12.4g\n", p.interval * 1e3,
                       p.interval > 0 ? rows / p.interval : 0.0,
                       p.latency * 1e3);
  }
}

void printInferenceReport(const InferencePipelineResult &r,
                          llvm::raw_ostream &os) {
  os << "pipelined inference: " << r.report.size()
     << " stages, micro-batches of " << r.rows << " rows\n";
  os << "stage  device     layers           params   forward ms  "
        "messages ms     memory\n";
  for (const InferenceStageReport &s : r.report)
    os << llvm::format(
        "%-6lld %-10s %4lld-%-5lld %12lld %12.4g %12.4g %7.1f MiB\n",
        static_cast<long long>(s.index), s.device.c_str(),
        static_cast<long long>(s.firstLayer),
        static_cast<long long>(s.endLayer - 1),
        static_cast<long long>(s.parameters), s.forward * 1e3, s.transfer * 1e3,
        s.memoryBytes / 1048576.0);
  double interval = r.interval();
  os << llvm::format("predicted: a micro-batch every %.4g ms streaming (%.0f "
                     "rows/s), %.4g ms through all stages\n",
                     interval * 1e3, interval > 0 ? r.rows / interval : 0.0,
                     r.latency() * 1e3);
  if (!r.oneStage || *r.oneStage <= 0 || interval <= 0)
    return;
  os << llvm::format("predicted: one stage on %s: %.4g ms a micro-batch "
                     "(%.0f rows/s); the pipeline streams at %.2fx its rate",
                     r.oneStageDevice.c_str(), *r.oneStage * 1e3,
                     r.rows / *r.oneStage, *r.oneStage / interval);
  if (*r.oneStage < interval)
    os << " (slower: compile for --devices=" << r.oneStageDevice << " instead)";
  os << "\n";
}

} // namespace gpipe
