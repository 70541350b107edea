//===- Schedule.cpp - Static GPipe and 1F1B schedules ---------------------===//
#include "Transforms/Schedule.h"
#include "Transforms/Passes.h"

#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/ScheduleGenerator.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/ErrorHandling.h"

namespace gpipe {
#define GEN_PASS_DEF_SCHEDULE
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

llvm::SmallVector<std::string> gpipe::deviceKeys(const ScheduleRequest &r) {
  llvm::SmallVector<std::string> keys;
  for (auto [s, device] : llvm::enumerate(r.devices))
    keys.push_back(
        StagePlacement{device, s < r.ranks.size() ? r.ranks[s] : 0}.key());
  return keys;
}

ScheduleOp gpipe::buildSchedule(OpBuilder &b, Location loc,
                                const ScheduleRequest &r) {
  int64_t k = r.devices.size(), m = r.microBatches;
  const ScheduleKindInfo &info = scheduleKindInfo(r.kind);
  int64_t v =
      info.interleaves ? virtualStagesOf(deviceKeys(r), info.layout) : 1;
  llvm::SmallVector<StageActions> actions = info.generate(k, m, v);
  // The partitioner's memory estimate reads the closed form: every
  // schedule built checks it against the order (a new kind with a wrong
  // one fails its first test).
  for (int64_t s = 0; s < k; ++s)
    if (maxInFlight(actions[s]) != info.inFlight(k, m, s, v))
      llvm::report_fatal_error(llvm::Twine("schedule '") + info.name +
                               "': its in-flight count disagrees with its "
                               "order on stage " +
                               llvm::Twine(s));
  // Stages sharing a device in turns: the device's order counts
  // instructions (a backward that recomputes is two), so each action's
  // first instruction's turn follows from the actions before it there.
  int64_t devices = k / v;
  llvm::DenseMap<std::pair<int64_t, int64_t>, int64_t> firstTurn;
  if (v > 1)
    for (int64_t d = 0; d < devices; ++d) {
      std::vector<std::tuple<int64_t, int64_t, int64_t>> order; // turn, s, i
      for (int64_t s = 0; s < k; ++s)
        if (deviceOfStage(s, k, v, info.layout) == d)
          for (auto [i, a] : llvm::enumerate(actions[s]))
            order.emplace_back(a.turn, s, static_cast<int64_t>(i));
      llvm::sort(order);
      int64_t turn = 0;
      for (auto [t, s, i] : order) {
        firstTurn[{s, i}] = turn;
        const ScheduleAction &a = actions[s][i];
        bool recomputes = r.recompute[s] && a.op != InstructionOp::Forward &&
                          a.op != InstructionOp::BackwardWeight;
        turn += recomputes ? 2 : 1;
      }
    }
  auto schedule = b.create<ScheduleOp>(loc, k, m);
  Block *body = new Block();
  schedule.getBody().push_back(body);
  OpBuilder sb = OpBuilder::atBlockEnd(body);
  for (int64_t s = 0; s < k; ++s) {
    ScheduleRequest::Memory memory = s < static_cast<int64_t>(r.memory.size())
                                         ? r.memory[s]
                                         : ScheduleRequest::Memory{};
    auto i64 = [&](std::optional<int64_t> v) {
      return v ? sb.getI64IntegerAttr(*v) : IntegerAttr();
    };
    auto stream = sb.create<StreamOp>(
        loc, s, r.devices[s], i64(memory.staticBytes), i64(memory.stashBytes),
        i64(memory.limit),
        v > 1 ? i64(deviceOfStage(s, k, v, info.layout)) : IntegerAttr());
    Block *block = new Block();
    stream.getBody().push_back(block);
    OpBuilder ib = OpBuilder::atBlockEnd(block);
    // The kind's compute order, with the transfers around it: a forward
    // receives its inputs from the previous stage and sends its outputs
    // to the next; a backward receives its output gradients, runs the
    // forward again first where the stage recomputes, and sends its input
    // gradients back.
    for (auto [i, a] : llvm::enumerate(actions[s])) {
      std::optional<int64_t> turn;
      if (v > 1)
        turn = firstTurn.lookup({s, static_cast<int64_t>(i)});
      // The next compute instruction's turn, where it has one.
      auto next = [&]() -> IntegerAttr {
        if (!turn)
          return IntegerAttr();
        return ib.getI64IntegerAttr((*turn)++);
      };
      if (a.op == InstructionOp::Forward) {
        if (s > 0)
          ib.create<RecvActivationInstr>(loc, a.microBatch, s - 1);
        ib.create<ForwardInstr>(loc, a.microBatch, next());
        if (s + 1 < k)
          ib.create<SendActivationInstr>(loc, a.microBatch, s + 1);
      } else if (a.op == InstructionOp::BackwardWeight) {
        // The weights' part reads what its input part left: no transfer.
        ib.create<BackwardWeightInstr>(loc, a.microBatch, next());
      } else {
        bool split = a.op == InstructionOp::BackwardInput;
        assert((split || a.op == InstructionOp::Backward) &&
               "a forward or a backward");
        if (s + 1 < k)
          ib.create<RecvGradientInstr>(loc, a.microBatch, s + 1);
        if (r.recompute[s])
          ib.create<RecomputeInstr>(loc, a.microBatch, next());
        if (split)
          ib.create<BackwardInputInstr>(loc, a.microBatch, next());
        else
          ib.create<BackwardInstr>(loc, a.microBatch, next());
        if (s > 0)
          ib.create<SendGradientInstr>(loc, a.microBatch, s - 1);
      }
    }
    ib.create<OptimizerStepInstr>(loc);
  }
  return schedule;
}

namespace {

struct SchedulePass : public gpipe::impl::ScheduleBase<SchedulePass> {
  using ScheduleBase::ScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    SmallVector<StageOp> stages;
    if (forward)
      for (auto s : forward.front().getOps<StageOp>())
        stages.push_back(s);
    if (stages.empty()) {
      module.emitError("no gpipe.stage in @forward to schedule (run "
                       "gpipe-partition first)");
      return signalPassFailure();
    }
    if (!parseScheduleKind(kind)) {
      module.emitError("schedule kind must be ")
          << scheduleKindNames() << ", not '" << kind << "'";
      return signalPassFailure();
    }
    std::optional<RecomputePolicy> policy = parseRecomputePolicy(recompute);
    if (!policy) {
      module.emitError("recompute must be never, always, except-last or "
                       "auto");
      return signalPassFailure();
    }
    ScheduleRequest r;
    r.kind = *parseScheduleKind(kind);
    r.microBatches = microBatches;
    int64_t k = stages.size();
    for (auto [s, stage] : llvm::enumerate(stages)) {
      r.devices.push_back(stage.getDevice().str());
      // Auto: what the partitioner chose for the stage.
      auto chosen = stage->getAttrOfType<BoolAttr>("gpipe.recomputes");
      r.recompute.push_back(*policy == RecomputePolicy::Auto
                                ? chosen && chosen.getValue()
                                : recomputesStage(*policy, s, k));
      auto get = [&](StringRef name) -> std::optional<int64_t> {
        if (auto a = stage->getAttrOfType<IntegerAttr>(name))
          return a.getInt();
        return std::nullopt;
      };
      r.memory.push_back({get("gpipe.static_bytes"), get("gpipe.stash_bytes"),
                          get("gpipe.memory_limit")});
    }
    if (const ScheduleKindInfo &info = scheduleKindInfo(r.kind);
        info.interleaves) {
      std::string why =
          interleavingError(deviceKeys(r), r.microBatches, info.layout);
      if (!why.empty()) {
        module.emitError("schedule ") << kind << " " << why;
        return signalPassFailure();
      }
    }
    OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
    ScheduleOp schedule = buildSchedule(b, module.getLoc(), r);
    if (failed(verify(schedule)))
      return signalPassFailure();
  }
};

struct VerifySchedulePass
    : public gpipe::impl::VerifyScheduleBase<VerifySchedulePass> {
  void runOnOperation() override {
    bool any = false;
    WalkResult result = getOperation()->walk([&](ScheduleOp schedule) {
      any = true;
      if (failed(verify(schedule)))
        return WalkResult::interrupt();
      for (auto stream : schedule.getBody().front().getOps<StreamOp>()) {
        auto [alive, at] = stream.maxAliveMicroBatches();
        int64_t peak = stream.peakBytes();
        stream->setAttr("peak_bytes", Builder(stream).getI64IntegerAttr(peak));
        stream.emitRemark("stage ")
            << stream.getStage() << " on " << stream.getDevice()
            << ": peak memory " << peak << " bytes, " << alive
            << " micro-batches alive at once, "
            << stream.maxStashedMicroBatches().first << " of them in the stash";
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    if (!any) {
      getOperation()->emitError("no gpipe.schedule to verify");
      return signalPassFailure();
    }
  }
};

} // namespace
