//===- ScheduleSimulator.cpp - A schedule played with durations -----------===//
#include "Analysis/Planner/ScheduleSimulator.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <optional>
#include <set>
#include <tuple>

using namespace mlir;
using namespace gpipe;

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
  // Whether each stream has run a forward (backward) yet: the first
  // converts the stage's parameters.
  SmallVector<bool> forwarded(k, false), backwarded(k, false);
  // When each stage reached its optimizer step: its tied gradients' send.
  SmallVector<std::optional<double>> reachedOptimizer(times.size());
  // When each (rank, device) is next free: stages sharing a core.
  std::map<std::pair<int64_t, std::string>, double> deviceFree;
  // The stream that last ran on each device.
  std::map<std::pair<int64_t, std::string>, size_t> lastStream;
  // Stages taking turns on a device (an interleaved schedule): the turn
  // each device group runs next.
  std::map<int64_t, int64_t> nextTurn;
  SmallVector<llvm::DenseSet<int64_t>> direct(k);
  for (size_t i = 0; i < k; ++i) {
    pc.push_back(streams[i].getBody().front().begin());
    for (int64_t mb : streams[i].directlyCarriedMicroBatches())
      direct[i].insert(mb);
  }
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
        // A receive waits for the message's arrival (kind 0: activation,
        // 1: gradient); blocked until its send has run. A receiver in the
        // sender's process that waited past its spin has blocked: the
        // message wakes it (one waiting on another rank polls MPI and
        // never blocks: its message's time is on the wire).
        auto arrives = [&](double at, int64_t peer) {
          if (times[peer].rank == t.rank && at > clock[i] + t.handoffs.spin)
            at += t.handoffs.wake;
          start = std::max(start, at);
        };
        auto waitFor = [&](int kind, int64_t peer) {
          auto it = arrival.find({kind, peer, mb});
          if (it == arrival.end())
            blocked = true;
          else
            arrives(it->second, peer);
        };
        // A backward (or its input part) of `total` seconds: a stage that
        // recomputes has the forward in it, drawn as the recompute box
        // before it; a directly carried micro-batch loads no stash.
        auto backward = [&](int64_t of, double total) {
          mb = of;
          double load = direct[i].contains(mb) ? t.stashLoad : 0;
          duration = std::max(0.0, total - load - recomputed[i]) +
                     (backwarded[i] ? 0 : t.firstBackward);
          backwarded[i] = true;
          recomputed[i] = 0;
        };
        llvm::TypeSwitch<Operation *>(op)
            .Case([&](ForwardInstr f) {
              // A directly carried micro-batch's kept values stay where
              // the forward left them, in the arena it shares with the
              // backward: no store (as no load below).
              mb = f.getMicroBatch();
              double store = direct[i].contains(mb) ? t.stashLoad : 0;
              duration = std::max(0.0, t.forward - store) +
                         (forwarded[i] ? 0 : t.firstForward);
              forwarded[i] = true;
            })
            .Case([&](BackwardInstr f) {
              backward(f.getMicroBatch(), t.backward);
            })
            .Case([&](BackwardInputInstr f) {
              backward(f.getMicroBatch(), t.backwardInput);
            })
            .Case([&](BackwardWeightInstr f) {
              mb = f.getMicroBatch();
              duration = t.backwardWeight;
            })
            .Case([&](RecomputeInstr f) {
              duration = std::min(t.forward, t.backward);
              recomputed[i] = duration;
              mb = f.getMicroBatch();
            })
            .Case([&](OptimizerStepInstr) {
              // Tied weights: the peers' gradients first (a peer waiting
              // for this one's has it: the send comes before any wait).
              if (!reachedOptimizer[stage])
                reachedOptimizer[stage] = clock[i];
              for (int64_t peer : t.tied.peers) {
                if (!reachedOptimizer[peer]) {
                  blocked = true;
                  return;
                }
                arrives(*reachedOptimizer[peer] +
                            (times[peer].rank != t.rank ? t.tied.wire : 0),
                        peer);
              }
              duration = t.optimizer + t.tied.copies;
            })
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
              waitFor(0, f.getPeer());
            })
            .Case([&](RecvGradientInstr f) {
              mb = f.getMicroBatch();
              waitFor(1, f.getPeer());
            });
        auto turn = op->getAttrOfType<IntegerAttr>("turn");
        std::optional<uint64_t> group = streams[i].getDeviceGroup();
        if (turn && group && nextTurn[*group] != turn.getInt())
          blocked = true;
        if (blocked)
          break;
        if (turn && group)
          ++nextTurn[*group];
        double reached = clock[i];
        if (duration > 0) {
          std::pair<int64_t, std::string> device{t.rank,
                                                 streams[i].getDevice().str()};
          double &free = deviceFree[device];
          // The core passes from another stream's thread to this one's.
          auto last = lastStream.find(device);
          bool handoff = last != lastStream.end() && last->second != i;
          start = std::max(start, free + (handoff ? t.handoffs.turn : 0));
          free = start + duration;
          lastStream[device] = i;
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
  // Idle of the devices: stages sharing one count as one.
  std::set<std::pair<int64_t, std::string>> used;
  for (size_t i = 0; i < k; ++i)
    used.insert(
        {times[streams[i].getStage()].rank, streams[i].getDevice().str()});
  double devices = static_cast<double>(used.size());
  out.bubble = out.stepTime > 0 ? 1 - work / (out.stepTime * devices) : 0;
  return out;
}
