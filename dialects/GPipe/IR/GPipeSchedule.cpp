//===- GPipeSchedule.cpp - Invariants of a static schedule ----------------===//
//
// ScheduleOp's region verifier: per-stream structure (each micro-batch runs
// forward then backward once, recompute in between, one final optimizer
// step), matching of every transfer with its peer, and freedom from deadlock,
// proved by running the streams as processes with asynchronous sends and
// blocking receives until all finish or none can move.
//
//===----------------------------------------------------------------------===//
#include "GPipe/IR/GPipeOps.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <set>
#include <tuple>

using namespace mlir;
using namespace gpipe;

namespace {

/// A message on the wire: (kind, from, to, micro-batch); kind 0 is an
/// activation, 1 a gradient.
using Message = std::tuple<int, int64_t, int64_t, int64_t>;

LogicalResult verifyStream(StreamOp stream, int64_t numStages,
                           int64_t microBatches) {
  int64_t stage = stream.getStage();
  // backward: a whole backward or its input part (B); weight: its
  // weight part (W), after B.
  DenseMap<int64_t, int> forward, recompute, backward, split, weight;
  int optimizerSteps = 0;
  for (Operation &op : stream.getBody().front()) {
    if (optimizerSteps)
      return op.emitOpError("follows the optimizer step of stream ") << stage;
    auto checkMicroBatch = [&](int64_t mb) -> LogicalResult {
      if (mb < 0 || mb >= microBatches)
        return op.emitOpError("micro-batch ")
               << mb << " is out of range [0, " << microBatches << ")";
      return success();
    };
    auto checkPeer = [&](int64_t mb, int64_t peer,
                         int64_t expected) -> LogicalResult {
      if (failed(checkMicroBatch(mb)))
        return failure();
      if (peer != expected || peer < 0 || peer >= numStages)
        return op.emitOpError("peer ") << peer << " of stage " << stage
                                       << " must be stage " << expected;
      return success();
    };
    // A backward, or the input part of a split one: once, after the
    // forward.
    auto runBackward = [&](int64_t mb, StringRef name) -> LogicalResult {
      if (failed(checkMicroBatch(mb)))
        return failure();
      if (!forward.count(mb))
        return op.emitOpError(name)
               << " of micro-batch " << mb << " comes before its forward";
      if (backward[mb]++)
        return op.emitOpError("micro-batch ") << mb << " runs backward twice";
      return success();
    };
    LogicalResult result =
        llvm::TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](ForwardInstr i) -> LogicalResult {
              if (failed(checkMicroBatch(i.getMicroBatch())))
                return failure();
              if (forward[i.getMicroBatch()]++)
                return op.emitOpError("micro-batch ")
                       << i.getMicroBatch() << " runs forward twice";
              return success();
            })
            .Case([&](RecomputeInstr i) -> LogicalResult {
              int64_t mb = i.getMicroBatch();
              if (failed(checkMicroBatch(mb)))
                return failure();
              if (!forward.count(mb) || backward.count(mb) || recompute[mb]++)
                return op.emitOpError("recompute of micro-batch ")
                       << mb
                       << " must come once, after its forward and "
                          "before its backward";
              return success();
            })
            .Case([&](BackwardInstr i) {
              return runBackward(i.getMicroBatch(), "backward");
            })
            .Case([&](BackwardInputInstr i) -> LogicalResult {
              if (failed(runBackward(i.getMicroBatch(), "backward_input")))
                return failure();
              ++split[i.getMicroBatch()];
              return success();
            })
            .Case([&](BackwardWeightInstr i) -> LogicalResult {
              int64_t mb = i.getMicroBatch();
              if (failed(checkMicroBatch(mb)))
                return failure();
              if (!split.count(mb))
                return op.emitOpError("backward_weight of micro-batch ")
                       << mb << " must follow its backward_input";
              if (weight[mb]++)
                return op.emitOpError("micro-batch ")
                       << mb << " runs backward_weight twice";
              return success();
            })
            .Case([&](SendActivationInstr i) {
              return checkPeer(i.getMicroBatch(), i.getPeer(), stage + 1);
            })
            .Case([&](RecvActivationInstr i) {
              return checkPeer(i.getMicroBatch(), i.getPeer(), stage - 1);
            })
            .Case([&](SendGradientInstr i) {
              return checkPeer(i.getMicroBatch(), i.getPeer(), stage - 1);
            })
            .Case([&](RecvGradientInstr i) {
              return checkPeer(i.getMicroBatch(), i.getPeer(), stage + 1);
            })
            .Case([&](OptimizerStepInstr) {
              ++optimizerSteps;
              return success();
            })
            .Default([&](Operation *other) {
              return other->emitOpError("is not a schedule instruction");
            });
    if (failed(result))
      return failure();
  }
  for (int64_t mb = 0; mb < microBatches; ++mb) {
    if (!forward.count(mb) || !backward.count(mb))
      return stream.emitOpError("stage ")
             << stage << " does not run forward and backward of micro-batch "
             << mb;
    if (split.count(mb) && !weight.count(mb))
      return stream.emitOpError("stage ")
             << stage << " runs backward_input of micro-batch " << mb
             << " without its backward_weight";
  }
  if (optimizerSteps != 1)
    return stream.emitOpError("stage ")
           << stage << " must end with exactly one optimizer_step";
  return success();
}

std::optional<Message> messageOf(Operation *op, int64_t stage, bool &isSend) {
  return llvm::TypeSwitch<Operation *, std::optional<Message>>(op)
      .Case([&](SendActivationInstr i) {
        isSend = true;
        return Message{0, stage, i.getPeer(), i.getMicroBatch()};
      })
      .Case([&](RecvActivationInstr i) {
        isSend = false;
        return Message{0, i.getPeer(), stage, i.getMicroBatch()};
      })
      .Case([&](SendGradientInstr i) {
        isSend = true;
        return Message{1, stage, i.getPeer(), i.getMicroBatch()};
      })
      .Case([&](RecvGradientInstr i) {
        isSend = false;
        return Message{1, i.getPeer(), stage, i.getMicroBatch()};
      })
      .Default([](Operation *) { return std::nullopt; });
}

/// A compute instruction's place in its device's order, where its stream
/// shares the device (gpipe.stream's device_group).
std::optional<int64_t> turnOf(Operation *op) {
  if (auto turn = op->getAttrOfType<IntegerAttr>("turn"))
    return turn.getInt();
  return std::nullopt;
}

bool isCompute(Operation *op) {
  return isa<ForwardInstr, RecomputeInstr, BackwardInstr, BackwardInputInstr,
             BackwardWeightInstr>(op);
}

/// Streams of one device_group take turns: every compute instruction of
/// theirs has a turn, rising within each stream, and the group's turns
/// are 0, 1, ... once each; no other stream's instruction has one.
LogicalResult verifyTurns(ArrayRef<StreamOp> streams) {
  std::map<int64_t, std::map<int64_t, Operation *>> groups;
  std::map<uint64_t, StreamOp> deviceOf; // device group -> its first stream
  for (StreamOp stream : streams) {
    std::optional<uint64_t> group = stream.getDeviceGroup();
    if (group) {
      StreamOp first = deviceOf.emplace(*group, stream).first->second;
      if (first.getDevice() != stream.getDevice())
        return stream.emitOpError("is on ")
               << stream.getDevice() << ", but its device group " << *group
               << " is stream " << first.getStage() << "'s, on "
               << first.getDevice();
    }
    int64_t last = -1;
    for (Operation &op : stream.getBody().front()) {
      std::optional<int64_t> turn = turnOf(&op);
      if (!group) {
        if (turn)
          return op.emitOpError("has a turn, but stream ")
                 << stream.getStage() << " has its device to itself";
        continue;
      }
      if (!isCompute(&op))
        continue;
      if (!turn)
        return op.emitOpError("has no turn on a device that stream ")
               << stream.getStage() << " shares";
      if (*turn <= last)
        return op.emitOpError("turn ")
               << *turn << " does not follow its stream's turn " << last;
      last = *turn;
      if (!groups[*group].emplace(*turn, &op).second)
        return op.emitOpError("turn ")
               << *turn << " is taken twice on device group " << *group;
    }
  }
  for (auto &[group, turns] : groups)
    if (turns.rbegin()->first + 1 != static_cast<int64_t>(turns.size()))
      return turns.rbegin()->second->emitOpError("device group ")
             << group << " skips turns: " << turns.size()
             << " instructions up to turn " << turns.rbegin()->first;
  return success();
}

/// Every send has one receive and vice versa; then the streams run to the
/// end without blocking forever.
LogicalResult verifyCommunication(ScheduleOp schedule,
                                  MutableArrayRef<StreamOp> streams) {
  std::map<Message, Operation *> sends, recvs;
  for (StreamOp stream : streams) {
    for (Operation &op : stream.getBody().front()) {
      bool isSend = false;
      std::optional<Message> msg = messageOf(&op, stream.getStage(), isSend);
      if (!msg)
        continue;
      auto &table = isSend ? sends : recvs;
      if (!table.emplace(*msg, &op).second)
        return op.emitOpError("duplicates a transfer of micro-batch ")
               << std::get<3>(*msg);
    }
  }
  for (auto &[msg, op] : recvs)
    if (!sends.count(msg))
      return op->emitOpError("has no matching send on stage ")
             << std::get<1>(msg);
  for (auto &[msg, op] : sends)
    if (!recvs.count(msg))
      return op->emitOpError("has no matching receive on stage ")
             << std::get<2>(msg);

  // Run the streams: a receive proceeds once its send has executed, an
  // instruction with a turn once its device's turn before it has run.
  std::set<Message> delivered;
  std::map<int64_t, int64_t> nextTurn; // device group -> turn
  std::vector<Block::iterator> pc;
  for (StreamOp s : streams)
    pc.push_back(s.getBody().front().begin());
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      Block &block = streams[i].getBody().front();
      while (pc[i] != block.end()) {
        bool isSend = false;
        std::optional<Message> msg =
            messageOf(&*pc[i], streams[i].getStage(), isSend);
        if (msg && !isSend && !delivered.count(*msg))
          break;
        std::optional<int64_t> turn = turnOf(&*pc[i]);
        std::optional<uint64_t> group = streams[i].getDeviceGroup();
        if (turn && nextTurn[*group] != *turn)
          break;
        if (turn)
          ++nextTurn[*group];
        if (msg && isSend)
          delivered.insert(*msg);
        ++pc[i];
        progress = true;
      }
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    if (pc[i] == streams[i].getBody().front().end())
      continue;
    InFlightDiagnostic diag = schedule.emitOpError("deadlocks: stage ")
                              << streams[i].getStage()
                              << " waits forever at this instruction";
    if (turnOf(&*pc[i]))
      diag << " (a turn on a device it shares)";
    diag.attachNote(pc[i]->getLoc()) << "blocked here";
    return diag;
  }
  return success();
}

} // namespace

std::pair<int64_t, Operation *> StreamOp::maxAliveMicroBatches() {
  int64_t alive = 0, most = 0;
  Operation *at = nullptr;
  for (Operation &op : getBody().front()) {
    if (isa<ForwardInstr>(op) && ++alive > most) {
      most = alive;
      at = &op;
    }
    // A micro-batch's kept values are read until its backward ends: the
    // whole one, or its weight part.
    if (isa<BackwardInstr, BackwardWeightInstr>(op))
      --alive;
  }
  return {most, at};
}

SmallVector<int64_t> StreamOp::directlyCarriedMicroBatches() {
  SmallVector<int64_t> direct;
  std::optional<int64_t> pending; // the last forward's micro-batch
  // A split backward's parts each have an arena of their own: every
  // micro-batch of a stream that splits them goes through the stash, which
  // the weight part reads too.
  if (llvm::any_of(getBody().front(), [](Operation &op) {
        return isa<BackwardInputInstr, BackwardWeightInstr>(op);
      }))
    return direct;
  for (Operation &op : getBody().front()) {
    auto mbAttr = op.getAttrOfType<IntegerAttr>("micro_batch");
    bool compute = isa<ForwardInstr, RecomputeInstr, BackwardInstr,
                       BackwardInputInstr, BackwardWeightInstr>(op);
    if (!compute)
      continue;
    int64_t mb = mbAttr.getInt();
    if (isa<ForwardInstr>(op)) {
      pending = mb;
    } else if (isa<BackwardInstr, RecomputeInstr>(op)) {
      if (pending == mb)
        direct.push_back(mb);
      pending.reset();
    } else {
      pending.reset();
    }
  }
  return direct;
}

std::pair<int64_t, Operation *> StreamOp::maxStashedMicroBatches() {
  llvm::SmallDenseSet<int64_t> direct;
  for (int64_t mb : directlyCarriedMicroBatches())
    direct.insert(mb);
  int64_t stashed = 0, most = 0;
  Operation *at = nullptr;
  for (Operation &op : getBody().front()) {
    auto mb = op.getAttrOfType<IntegerAttr>("micro_batch");
    if (!mb || direct.contains(mb.getInt()))
      continue;
    if (isa<ForwardInstr>(op) && ++stashed > most) {
      most = stashed;
      at = &op;
    } else if (isa<BackwardInstr, BackwardWeightInstr>(op)) {
      --stashed;
    }
  }
  return {most, at};
}

int64_t StreamOp::peakBytes() {
  return static_cast<int64_t>(getStaticBytes().value_or(0)) +
         static_cast<int64_t>(getStashBytes().value_or(0)) *
             maxStashedMicroBatches().first;
}

LogicalResult ScheduleOp::verifyRegions() {
  int64_t numStages = getNumStages(), microBatches = getMicroBatches();
  if (numStages <= 0 || microBatches <= 0)
    return emitOpError("stages and micro_batches must be positive");
  SmallVector<StreamOp> streams(numStages);
  for (Operation &op : getBody().front()) {
    auto stream = llvm::dyn_cast<StreamOp>(op);
    if (!stream)
      return op.emitOpError("is not a gpipe.stream");
    int64_t stage = stream.getStage();
    if (stage < 0 || stage >= numStages)
      return stream.emitOpError("stage ")
             << stage << " is out of range [0, " << numStages << ")";
    if (streams[stage])
      return stream.emitOpError("stage ") << stage << " has two streams";
    streams[stage] = stream;
  }
  for (int64_t s = 0; s < numStages; ++s) {
    if (!streams[s])
      return emitOpError("stage ") << s << " has no stream";
    if (failed(verifyStream(streams[s], numStages, microBatches)))
      return failure();
    std::optional<uint64_t> limit = streams[s].getMemoryLimit();
    if (!limit)
      continue;
    auto [stashed, at] = streams[s].maxStashedMicroBatches();
    int64_t peak = streams[s].peakBytes();
    if (peak > static_cast<int64_t>(*limit)) {
      InFlightDiagnostic diag = streams[s].emitOpError("stage ")
                                << s << " on " << streams[s].getDevice()
                                << " needs " << peak << " bytes at its peak ("
                                << streams[s].getStaticBytes().value_or(0)
                                << " static";
      if (stashed > 0)
        diag << " + " << stashed << " micro-batches in the stash of "
             << streams[s].getStashBytes().value_or(0) << " bytes";
      else
        diag << ", no micro-batch in the stash";
      diag << "), " << peak - static_cast<int64_t>(*limit)
           << " more than its memory limit of " << *limit;
      if (at)
        diag.attachNote(at->getLoc()) << "the peak is reached here";
      return diag;
    }
  }
  if (failed(verifyTurns(streams)))
    return failure();
  // Streams sharing a device share its memory: their peaks together.
  std::map<int64_t, std::pair<int64_t, StreamOp>> shared;
  for (StreamOp s : streams)
    if (std::optional<uint64_t> group = s.getDeviceGroup()) {
      auto &[peak, first] = shared[*group];
      peak += s.peakBytes();
      if (!first)
        first = s;
    }
  for (auto &[group, entry] : shared) {
    auto [peak, first] = entry;
    std::optional<uint64_t> limit = first.getMemoryLimit();
    if (limit && peak > static_cast<int64_t>(*limit))
      return first.emitOpError("the stages on ")
             << first.getDevice() << " need " << peak
             << " bytes at their peaks together, more than its memory limit "
                "of "
             << *limit;
  }
  return verifyCommunication(*this, streams);
}
