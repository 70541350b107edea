//===- Schedule.cpp - Static GPipe and 1F1B schedules ---------------------===//
#include "Transforms/Schedule.h"
#include "Transforms/Passes.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <tuple>

namespace gpipe {
#define GEN_PASS_DEF_SCHEDULE
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

ScheduleOp gpipe::buildSchedule(OpBuilder &b, Location loc,
                                const ScheduleRequest &r) {
  int64_t k = r.devices.size(), m = r.microBatches;
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
    auto stream =
        sb.create<StreamOp>(loc, s, r.devices[s], i64(memory.staticBytes),
                            i64(memory.stashBytes), i64(memory.limit));
    Block *block = new Block();
    stream.getBody().push_back(block);
    OpBuilder ib = OpBuilder::atBlockEnd(block);
    auto forward = [&](int64_t mb) {
      if (s > 0)
        ib.create<RecvActivationInstr>(loc, mb, s - 1);
      ib.create<ForwardInstr>(loc, mb);
      if (s + 1 < k)
        ib.create<SendActivationInstr>(loc, mb, s + 1);
    };
    auto backward = [&](int64_t mb) {
      if (s + 1 < k)
        ib.create<RecvGradientInstr>(loc, mb, s + 1);
      if (r.recompute[s])
        ib.create<RecomputeInstr>(loc, mb);
      ib.create<BackwardInstr>(loc, mb);
      if (s > 0)
        ib.create<SendGradientInstr>(loc, mb, s - 1);
    };
    if (r.kind == "1f1b") {
      int64_t warmup = std::min(k - s - 1, m), f = 0, bw = 0;
      while (f < warmup)
        forward(f++);
      while (f < m) {
        forward(f++);
        backward(bw++);
      }
      while (bw < m)
        backward(bw++);
    } else {
      for (int64_t mb = 0; mb < m; ++mb)
        forward(mb);
      for (int64_t mb = m - 1; mb >= 0; --mb)
        backward(mb);
    }
    ib.create<OptimizerStepInstr>(loc);
  }
  return schedule;
}

SchedulePrediction gpipe::predictSchedule(ScheduleOp schedule,
                                          ArrayRef<StageTimes> times) {
  SmallVector<StreamOp> streams;
  for (auto s : schedule.getBody().front().getOps<StreamOp>())
    streams.push_back(s);
  size_t k = streams.size();
  SchedulePrediction out;
  out.spans.resize(k);
  // (kind, from, micro-batch) -> the time the message arrives.
  std::map<std::tuple<int, int64_t, int64_t>, double> arrival;
  SmallVector<Block::iterator> pc;
  SmallVector<double> clock(k, 0), busy(k, 0), recomputed(k, 0);
  // When each (rank, device) is next free: stages sharing a core.
  std::map<std::pair<int64_t, std::string>, double> deviceFree;
  for (StreamOp s : streams)
    pc.push_back(s.getBody().front().begin());
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < k; ++i) {
      int64_t stage = streams[i].getStage();
      const StageTimes &t = times[stage];
      Block &block = streams[i].getBody().front();
      while (pc[i] != block.end()) {
        Operation *op = &*pc[i];
        double start = clock[i], duration = 0;
        int64_t mb = -1;
        std::string what = op->getName().stripDialect().str();
        bool blocked = false;
        llvm::TypeSwitch<Operation *>(op)
            .Case([&](ForwardInstr f) {
              duration = t.forward;
              mb = f.getMicroBatch();
            })
            .Case([&](BackwardInstr f) {
              // A stage that recomputes has the forward in its backward
              // time: drawn as the recompute box before it.
              duration = std::max(0.0, t.backward - recomputed[i]);
              recomputed[i] = 0;
              mb = f.getMicroBatch();
            })
            .Case([&](RecomputeInstr f) {
              duration = std::min(t.forward, t.backward);
              recomputed[i] = duration;
              mb = f.getMicroBatch();
            })
            .Case([&](OptimizerStepInstr) { duration = t.optimizer; })
            .Case([&](SendActivationInstr f) {
              mb = f.getMicroBatch();
              duration = t.transfer / 4;
              arrival[{0, stage, mb}] = start + duration + t.activationWire;
            })
            .Case([&](SendGradientInstr f) {
              mb = f.getMicroBatch();
              duration = t.transfer / 4;
              arrival[{1, stage, mb}] = start + duration + t.gradientWire;
            })
            .Case([&](RecvActivationInstr f) {
              mb = f.getMicroBatch();
              auto it = arrival.find({0, f.getPeer(), mb});
              if (it == arrival.end())
                blocked = true;
              else
                start = std::max(start, it->second);
            })
            .Case([&](RecvGradientInstr f) {
              mb = f.getMicroBatch();
              auto it = arrival.find({1, f.getPeer(), mb});
              if (it == arrival.end())
                blocked = true;
              else
                start = std::max(start, it->second);
            });
        if (blocked)
          break;
        double reached = clock[i];
        if (duration > 0) {
          double &free = deviceFree[{t.rank, streams[i].getDevice().str()}];
          start = std::max(start, free);
          free = start + duration;
        }
        clock[i] = start + duration;
        busy[i] += duration;
        bool receive = isa<RecvActivationInstr, RecvGradientInstr>(op);
        out.spans[stage].push_back(
            {what, mb, receive ? reached : start, clock[i]});
        ++pc[i];
        progress = true;
      }
    }
  }
  for (double c : clock)
    out.stepTime = std::max(out.stepTime, c);
  double work = 0;
  for (double b : busy)
    work += b;
  out.bubble =
      out.stepTime > 0 ? 1 - work / (out.stepTime * static_cast<double>(k)) : 0;
  return out;
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
    if (kind != "gpipe" && kind != "1f1b") {
      module.emitError("schedule kind must be gpipe or 1f1b, not '")
          << kind << "'";
      return signalPassFailure();
    }
    if (recompute != "never" && recompute != "always" &&
        recompute != "except-last") {
      module.emitError("recompute must be never, always or except-last");
      return signalPassFailure();
    }
    ScheduleRequest r;
    r.kind = kind;
    r.microBatches = microBatches;
    int64_t k = stages.size();
    for (auto [s, stage] : llvm::enumerate(stages)) {
      r.devices.push_back(stage.getDevice().str());
      r.recompute.push_back(
          recompute == "always" ||
          (recompute == "except-last" && static_cast<int64_t>(s) + 1 != k));
      auto get = [&](StringRef name) -> std::optional<int64_t> {
        if (auto a = stage->getAttrOfType<IntegerAttr>(name))
          return a.getInt();
        return std::nullopt;
      };
      r.memory.push_back({get("gpipe.static_bytes"), get("gpipe.stash_bytes"),
                          get("gpipe.memory_limit")});
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
            << " micro-batches alive at once";
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
