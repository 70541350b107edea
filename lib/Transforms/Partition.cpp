//===- Partition.cpp - Cutting @forward into pipeline stages --------------===//
//
// The layers of @forward (its ops other than parameters and constants, in
// order) are cut into one contiguous range per device, by a dynamic program
// over the cut positions (or by hand), and each range becomes a gpipe.stage.
// docs/pipeline.md describes the cost model.
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"
#include "Transforms/SplitForwardBackward.h"

#include "Analysis/CostModel.h"
#include "Analysis/Planner/LayerTable.h"
#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/ScheduleGenerator.h"
#include "Analysis/Planner/StagePartition.h"
#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"

#include <set>

namespace gpipe {
#define GEN_PASS_DEF_PARTITION
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// "12.5 MiB", "57.7 KiB" below a MiB, "96 bytes" below a KiB.
std::string mib(double bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (bytes >= (1 << 20))
    os << llvm::format("%.1f MiB", bytes / (1 << 20));
  else if (bytes >= 1024)
    os << llvm::format("%.1f KiB", bytes / 1024);
  else
    os << llvm::format("%.0f bytes", bytes);
  return s;
}

struct PartitionPass : public gpipe::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;

  LayerTable table;
  std::vector<Device> devices;
  PipelinePlan plan;
  SmallVector<DeviceProfile, 2> profiles;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("no @forward function to partition");
      return signalPassFailure();
    }
    if (failed(setUp(module, forward)))
      return signalPassFailure();
    FailureOr<SmallVector<int64_t>> cuts = choose(forward);
    if (failed(cuts) || failed(rewrite(forward, *cuts)))
      return signalPassFailure();
  }

  LogicalResult setUp(ModuleOp module, func::FuncOp forward) {
    llvm::Expected<std::vector<Device>> parsed = parseDevices(deviceList);
    if (!parsed)
      return module.emitError("--devices: ")
             << llvm::toString(parsed.takeError());
    this->devices = std::move(*parsed);
    std::optional<ScheduleKind> kind = parseScheduleKind(schedule);
    if (!kind)
      return module.emitError("schedule must be ")
             << scheduleKindNames() << ", not '" << schedule << "'";
    plan.schedule = *kind;
    std::optional<RecomputePolicy> policy = parseRecomputePolicy(recompute);
    if (!policy)
      return module.emitError("recompute must be never, always, "
                              "except-last or auto, not '")
             << recompute << "'";
    plan.recompute = *policy;
    if (microBatches < 1)
      return module.emitError("micro-batches must be at least 1");
    plan.microBatches = microBatches;
    plan.inference = inference;
    for (const Device &d : this->devices) {
      plan.stages.push_back({d.str(), 0});
      llvm::Expected<DeviceProfile> p = profileFor(profile, d);
      if (!p)
        return module.emitError(llvm::toString(p.takeError()));
      if (memoryPerDevice > 0)
        setDeviceMemory(*p, memoryPerDevice);
      profiles.push_back(*p);
    }
    if (!profiles.empty() && !profiles.front().outdatedFits.empty())
      module.emitWarning()
          << profiles.front().source << ": the fits of "
          << llvm::join(profiles.front().outdatedFits, ", ")
          << " time their kernels by another measure than this compiler's "
             "(poolings are timed by their windows' taps): they are left "
             "out, those kernels priced by the roofline; calibrate anew "
             "(gpipe-opt --calibrate -o profile.json)";
    // The stages run at once: the cores they keep busy share the host.
    std::set<int> busy;
    for (const Device &d : this->devices)
      if (d.kind == DeviceKind::Cpu)
        busy.insert(d.ids.begin(), d.ids.end());
    shareHost(profiles, static_cast<int64_t>(busy.size()));
    // Stages listed on one device (of one rank) share its caches; their
    // ranks tell an interleaved plan's devices apart.
    for (int64_t s = 0; s < static_cast<int64_t>(this->devices.size()); ++s)
      plan.stages[s].rank = rankOfDeviceName(deviceName(s));
    shareDevice(profiles, plan.deviceKeys());
    std::optional<CostTable> costs;
    if (!costTable.empty()) {
      // Seconds as measured, for the rows of the micro-batch the stages are
      // compiled for (the table scales them).
      int64_t rows = LayerTable::microBatchRows(forward);
      llvm::Expected<CostTable> t = readCostTable(costTable, rows);
      if (!t)
        return module.emitError(llvm::toString(t.takeError()));
      costs = std::move(*t);
    }

    // Random dropouts get model-wide stream numbers before the cuts.
    int64_t stream = 0;
    Builder b(module.getContext());
    forward.walk([&](Operation *op) { nn::numberRandomStream(op, stream, b); });

    table =
        LayerTable::build(forward, optimizerSlots, costs ? &*costs : nullptr);
    // Where memory decides (auto recompute, a device's memory given), the
    // stash as the backward will keep it, for every cut (manual ones
    // too): without it a stage is taken to keep every result of its
    // layers (GPT 4x256: 64 MiB where the plan had 37).
    if (!plan.inference &&
        (plan.recompute == RecomputePolicy::Auto || memoryPerDevice > 0))
      setStash(module);
    if (table.size() < static_cast<int64_t>(this->devices.size()))
      return forward.emitError("the model has ")
             << table.size() << " layers, fewer than the "
             << this->devices.size() << " devices to cut it across";
    return success();
  }

  /// Records in the table what the backward reads from the forward, by
  /// layer (nothing when the model cannot be differentiated: the compile
  /// says why later).
  void setStash(ModuleOp module) {
    std::vector<LayerTable::StashedValue> stash = stashByLayer(module, table);
    if (!stash.empty())
      table.setStash(stash);
    stashKnown = true;
  }
  bool stashKnown = false;

  /// The cut positions: the first layer of stages 1..K-1.
  FailureOr<SmallVector<int64_t>> choose(func::FuncOp forward) {
    int64_t k = devices.size(), n = table.size();
    if (StringRef(stages).starts_with("manual:")) {
      SmallVector<StringRef> items;
      StringRef(stages).drop_front(7).split(items, ',');
      SmallVector<int64_t> cuts;
      for (StringRef item : items) {
        int64_t c;
        if (item.getAsInteger(10, c) || c <= (cuts.empty() ? 0 : cuts.back()) ||
            c >= n)
          return forward.emitError("--stages=")
                 << stages << ": cuts must be increasing layer indices in [1, "
                 << n << ")";
        cuts.push_back(c);
      }
      if (static_cast<int64_t>(cuts.size()) != k - 1)
        return forward.emitError("--stages=")
               << stages << " makes " << cuts.size() + 1 << " stages for " << k
               << " devices";
      return cuts;
    }
    if (stages != "auto")
      return forward.emitError("--stages must be auto or manual:i,j,..., not '")
             << stages << "'";
    // A plan that does not fit on the every-result estimate: again with
    // the stash (setUp took it where memory decides).
    FailureOr<SmallVector<int64_t>> best =
        StagePartitioner(table, plan, profiles, table.rows)
            .solve(/*withMemory=*/true);
    if (failed(best) && !stashKnown && !plan.inference) {
      setStash(forward->getParentOfType<ModuleOp>());
      best = StagePartitioner(table, plan, profiles, table.rows)
                 .solve(/*withMemory=*/true);
    }
    if (succeeded(best))
      return best;
    StagePartitioner partitioner(table, plan, profiles, table.rows);
    // Report what the best partition without the memory bound needs.
    SmallVector<int64_t> cuts = *partitioner.solve(/*withMemory=*/false);
    InFlightDiagnostic diag =
        forward.emitError("the model does not fit the devices' memory");
    SmallVector<int64_t> bounds{0};
    llvm::append_range(bounds, cuts);
    bounds.push_back(n);
    for (int64_t s = 0; s < k; ++s) {
      StageSlice c = partitioner.slice(s, bounds[s], bounds[s + 1]);
      double capacity = profiles[s].memoryCapacity;
      if (c.memory > capacity) {
        diag << "; stage " << s << " on " << deviceName(s) << " needs "
             << mib(c.memory) << ", " << mib(c.memory - capacity)
             << " more than its " << mib(capacity);
        if (profiles[s].runtimeReserve > 0)
          diag << " (--memory-per-device less the runtime's "
               << mib(profiles[s].runtimeReserve) << ")";
      }
    }
    diag << "; " << whatFits();
    return failure();
  }

  /// Stage `s`'s device as the user named it (with its rank, where the
  /// stages are on MPI ranks).
  std::string deviceName(int64_t s) const {
    SmallVector<StringRef> names;
    StringRef(deviceNames).split(names, ',');
    if (!deviceNames.empty() &&
        names.size() == static_cast<size_t>(devices.size()))
      return names[s].trim().str();
    return devices[s].str();
  }

  /// What would fit when the plan does not: recomputing (auto) on these
  /// devices, else the fewest devices like the last one, each recomputing
  /// where it must; else that no number of devices does.
  std::string whatFits() const {
    int64_t k = devices.size(), n = table.size();
    auto fits = [&](int64_t stages, RecomputePolicy policy) {
      PipelinePlan p = plan;
      p.recompute = policy;
      SmallVector<DeviceProfile, 2> ps(profiles.begin(), profiles.end());
      while (static_cast<int64_t>(p.stages.size()) < stages) {
        p.stages.push_back(p.stages.back());
        ps.push_back(profiles.back());
      }
      return succeeded(StagePartitioner(table, p, ps, table.rows).solve(true));
    };
    // (Inference keeps nothing for a backward: recomputing saves nothing.)
    bool recomputing = plan.inference ||
                       plan.recompute == RecomputePolicy::Always ||
                       plan.recompute == RecomputePolicy::Auto;
    if (!recomputing && fits(k, RecomputePolicy::Auto))
      return "--recompute=auto fits it on these devices (the stages that "
             "need it run their forward again)";
    // More devices of the last one's memory: the fewest that fit (the
    // memory a stage needs falls with its share of the layers).
    std::string with = recomputing ? "" : " with --recompute=auto";
    RecomputePolicy policy = plan.recompute == RecomputePolicy::Always
                                 ? plan.recompute
                                 : RecomputePolicy::Auto;
    // The search probes up to 256 devices (each probe cuts the model once).
    if (n > 256 && !fits(256, policy))
      return "not even 256 devices of " + mib(profiles.back().memoryCapacity) +
             " fit it";
    n = std::min<int64_t>(n, 256);
    if (n <= k || !fits(n, policy))
      return "no number of devices of " + mib(profiles.back().memoryCapacity) +
             " fits it (a layer alone needs more; more memory per device, "
             "fewer micro-batches or a smaller batch would)";
    // (Under 1F1B a stage keeps fewer micro-batches with fewer stages after
    // it, so fitting is not strictly monotone: this is a number that fits,
    // the fewest where it is.)
    int64_t lo = k, hi = n; // lo does not fit, hi does
    while (hi - lo > 1) {
      int64_t mid = lo + (hi - lo) / 2;
      (fits(mid, policy) ? hi : lo) = mid;
    }
    if (deviceNames.empty())
      return "it fits on " + std::to_string(hi) + " devices like " +
             devices.back().str() + with;
    // Stages on MPI ranks: as many ranks, each with such a device.
    std::string list;
    for (int64_t r = 0; r < hi; ++r)
      list += (r ? "," : "") + ("r" + std::to_string(r) + ":") +
              devices.back().str();
    if (hi > 4)
      list = "r0:" + devices.back().str() + ",...,r" + std::to_string(hi - 1) +
             ":" + devices.back().str();
    return "it fits on " + std::to_string(hi) + " ranks with a device like " +
           devices.back().str() + " each (--devices=" + list + ", mpirun -np " +
           std::to_string(hi) + ")" + with;
  }

  LogicalResult rewrite(func::FuncOp forward, ArrayRef<int64_t> cuts) {
    int64_t k = devices.size(), n = table.size();
    ArrayRef<Operation *> layers = table.layers;
    StagePartitioner partitioner(table, plan, profiles, table.rows);
    Block &body = forward.front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // The layer results crossing cut c, in definition order.
    auto crossing = [&](int64_t c) {
      SmallVector<Value> out;
      for (int64_t i = 0; i < c; ++i)
        for (Value r : layers[i]->getResults())
          if (table.lastUse.lookup(r) >= c)
            out.push_back(r);
      return out;
    };
    SmallVector<int64_t> bounds{0};
    llvm::append_range(bounds, cuts);
    bounds.push_back(n);

    OpBuilder b(ret);
    DenseMap<Value, int64_t> actId;
    DenseMap<Value, Value> current; // crossing value -> previous stage result
    auto argName = [&](BlockArgument arg) {
      auto name = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                       "gpipe.name");
      return name ? name.str() : "input" + std::to_string(arg.getArgNumber());
    };
    auto actName = [&](Value v) {
      auto [it, inserted] = actId.try_emplace(v, actId.size());
      return "act:" + std::to_string(it->second);
    };
    StageOp last;
    for (int64_t s = 0; s < k; ++s) {
      int64_t begin = bounds[s], end = bounds[s + 1];
      bool isLast = s == k - 1;
      SmallVector<Value> originals, operands;
      SmallVector<Attribute> inNames, inRoles;
      auto role = [&](Role r) { return RoleAttr::get(b.getContext(), r); };
      if (s > 0)
        for (Value v : crossing(begin)) {
          originals.push_back(v);
          operands.push_back(current.lookup(v));
          inNames.push_back(b.getStringAttr(actName(v)));
          inRoles.push_back(role(Role::Activation));
        }
      // Graph inputs go straight to the stages that use them.
      SetVector<BlockArgument> args;
      auto noteArgs = [&](Operation *op) {
        for (Value v : op->getOperands())
          if (auto arg = dyn_cast<BlockArgument>(v))
            args.insert(arg);
      };
      for (int64_t i = begin; i < end; ++i)
        noteArgs(layers[i]);
      if (isLast)
        noteArgs(ret);
      for (BlockArgument arg : args) {
        originals.push_back(arg);
        operands.push_back(arg);
        inNames.push_back(b.getStringAttr(argName(arg)));
        inRoles.push_back(role(argRole(forward, arg.getArgNumber())));
      }
      SmallVector<Value> yielded =
          isLast ? SmallVector<Value>(ret.getOperands()) : crossing(end);
      SmallVector<Type> resultTypes;
      SmallVector<Attribute> outNames, outRoles;
      for (auto [i, v] : llvm::enumerate(yielded)) {
        resultTypes.push_back(v.getType());
        if (isLast) {
          auto name = forward.getResultAttrOfType<StringAttr>(i, "gpipe.name");
          outNames.push_back(
              name ? name : b.getStringAttr("output" + std::to_string(i)));
          outRoles.push_back(role(resultRole(forward, i)));
        } else {
          outNames.push_back(b.getStringAttr(actName(v)));
          outRoles.push_back(role(Role::Activation));
        }
      }
      auto stage = b.create<StageOp>(forward.getLoc(), resultTypes, s,
                                     devices[s].str(), operands);
      Block *block = new Block();
      stage.getBody().push_back(block);
      IRMapping map;
      for (auto [v, operand] : llvm::zip(originals, operands))
        map.map(v, block->addArgument(operand.getType(), v.getLoc()));
      OpBuilder sb = OpBuilder::atBlockEnd(block);
      // Parameters and constants are cloned into each stage that reads them.
      auto materialize = [&](Operation *op) {
        for (Value v : op->getOperands()) {
          if (map.contains(v))
            continue;
          Operation *def = v.getDefiningOp();
          if (def && (isa<GetParameterOp>(def) ||
                      def->hasTrait<OpTrait::ConstantLike>()))
            sb.clone(*def, map);
        }
      };
      for (int64_t i = begin; i < end; ++i) {
        materialize(layers[i]);
        sb.clone(*layers[i], map);
      }
      if (isLast)
        materialize(ret);
      SmallVector<Value> results;
      for (Value v : yielded)
        results.push_back(map.lookup(v));
      sb.create<YieldOp>(forward.getLoc(), results);

      StageSlice c = partitioner.slice(s, begin, end);
      int64_t stageFlops = 0;
      for (int64_t i = begin; i < end; ++i)
        stageFlops += static_cast<int64_t>(table.flops[i]);
      stage->setAttr("gpipe.input_names", b.getArrayAttr(inNames));
      stage->setAttr("gpipe.output_names", b.getArrayAttr(outNames));
      stage->setAttr("gpipe.input_roles", b.getArrayAttr(inRoles));
      stage->setAttr("gpipe.output_roles", b.getArrayAttr(outRoles));
      stage->setAttr("gpipe.layers", b.getDenseI64ArrayAttr({begin, end}));
      stage->setAttr("gpipe.flops", b.getI64IntegerAttr(stageFlops));
      // Whether the stage recomputes (the policy's, or auto's choice).
      stage->setAttr("gpipe.recomputes", b.getBoolAttr(c.recomputes));
      stage->setAttr("gpipe.forward_time", b.getF64FloatAttr(c.forward));
      stage->setAttr("gpipe.backward_time", b.getF64FloatAttr(c.backward));
      // Of it, the weights' gradients (a zero-bubble schedule's W).
      stage->setAttr("gpipe.backward_weight_time",
                     b.getF64FloatAttr(c.backwardWeight));
      stage->setAttr("gpipe.transfer_time", b.getF64FloatAttr(c.transfer));
      stage->setAttr(
          "gpipe.activation_message_bytes",
          b.getDenseI64ArrayAttr({static_cast<int64_t>(c.inMessageBytes),
                                  static_cast<int64_t>(c.outMessageBytes)}));
      // Each layer's predicted seconds per micro-batch, by the name under
      // which gpipe-run --profile-ops times it, in the layers' order:
      // [name, forward, backward] (the layers of one ONNX node share a
      // name; gpipe-run adds them up, as it adds their measured times).
      SmallVector<Attribute> times;
      for (int64_t i = begin; i < end; ++i) {
        auto [fwd, bwd] = partitioner.layerSeconds(s, i, c.recomputes);
        times.push_back(
            b.getArrayAttr({b.getStringAttr(costTableKey(layers[i])),
                            b.getF64FloatAttr(fwd), b.getF64FloatAttr(bwd)}));
      }
      stage->setAttr("gpipe.op_times", b.getArrayAttr(times));
      if (c.forwardConversion > 0 || c.backwardConversion > 0)
        stage->setAttr("gpipe.conversion_time",
                       b.getDenseF64ArrayAttr(
                           {c.forwardConversion, c.backwardConversion}));
      stage->setAttr("gpipe.predicted_memory",
                     b.getI64IntegerAttr(static_cast<int64_t>(c.memory)));
      stage->setAttr("gpipe.memory_bandwidth",
                     b.getF64FloatAttr(profiles[s].memoryBandwidth));
      stage->setAttr("gpipe.cache_bytes",
                     b.getF64FloatAttr(profiles[s].cacheBytes));
      stage->setAttr("gpipe.stash_cache_bytes",
                     b.getF64FloatAttr(profiles[s].stashCache()));
      stage->setAttr("gpipe.copy_memory_bandwidth",
                     b.getF64FloatAttr(profiles[s].copyBandwidth()));
      stage->setAttr("gpipe.cached_copy_bandwidth",
                     b.getF64FloatAttr(profiles[s].linkBandwidth));
      if (std::optional<double> sum =
              partitioner.gradientSumPass(s, begin, end))
        stage->setAttr("gpipe.gradient_sum_time", b.getF64FloatAttr(*sum));
      stage->setAttr("gpipe.product_summed_share",
                     b.getF64FloatAttr(c.productSummedShare));
      // The optimizer step as calibrated (an SGD pass), when the profile
      // timed it.
      if (std::optional<double> step = profiles[s].kernelSeconds(
              "optimizer", c.trainableBytes, c.trainableBytes,
              /*backward=*/false))
        stage->setAttr("gpipe.optimizer_time", b.getF64FloatAttr(*step));
      // The runtime's hand-offs between stage threads, as calibrated.
      if (const ThreadHandoffs &h = profiles[s].handoffs; h.measured())
        stage->setAttr("gpipe.thread_handoff",
                       b.getDenseF64ArrayAttr({h.turn, h.wake, h.spin}));
      stage->setAttr("gpipe.memory_limit",
                     b.getI64IntegerAttr(
                         static_cast<int64_t>(profiles[s].memoryCapacity)));
      if (!isLast)
        for (auto [v, r] : llvm::zip(yielded, stage.getResults()))
          current[v] = r;
      last = stage;
    }
    ret->setOperands(last.getResults());
    // The original layers, then parameters and constants nobody reads.
    for (Operation *op : llvm::reverse(layers)) {
      op->dropAllUses();
      op->erase();
    }
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (!isa<StageOp, func::ReturnOp>(op) && op.use_empty())
        op.erase();
    return success();
  }
};

} // namespace
