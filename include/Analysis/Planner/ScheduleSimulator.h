//===- ScheduleSimulator.h - A schedule played with durations ---*- C++ -*-===//
//
// The predicted step of a plan: its gpipe.schedule played with each stage's
// instruction times. Part of the plan's cost model (PipelinePlan.h), shared
// by the driver's report and the bundle's predicted step.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PLANNER_SCHEDULESIMULATOR_H
#define GPIPE_ANALYSIS_PLANNER_SCHEDULESIMULATOR_H

#include "Analysis/CostModel.h"
#include "GPipe/IR/GPipeOps.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace gpipe {

/// A stage's share in the gradient exchange of the weights it trains with
/// other stages (a GPT's tied embedding and LM head), which its optimizer
/// step begins with (the runtime's StreamRunner::sumTiedGradients): each
/// copy sends its gradient to the others and waits for theirs.
struct TiedExchange {
  /// The other stages training a copy of one of the stage's weights.
  llvm::SmallVector<int64_t> peers;
  /// Seconds of the stage's own copies and sums of the gradients, and of a
  /// message on the wire to a peer of another rank.
  double copies = 0, wire = 0;
};

/// Seconds per micro-batch of each stage's instructions.
struct StageTimes {
  double forward = 0, backward = 0, transfer = 0, optimizer = 0;
  /// Between ranks: how long a sent activation (gradient) is on the wire
  /// after its send, before the receiver has it.
  double activationWire = 0, gradientWire = 0;
  /// The rank the stage runs in: stages of one rank naming the same device
  /// share it (their instructions take turns); other ranks' devices are
  /// their own (ranks on one host that pin the same cores get a warning
  /// from gpipe-run instead).
  int64_t rank = 0;
  /// Added to the step's first forward (backward) of the stage: the
  /// parameters its kernels convert once a step.
  double firstForward = 0, firstBackward = 0;
  /// One copy of the stash (the forward's store, or the backward's load):
  /// taken off the forward and the backward of a micro-batch whose kept
  /// values stay in the arena the two share
  /// (StreamOp::directlyCarriedMicroBatches).
  double stashLoad = 0;
  /// A backward's two parts, where the schedule splits it (zero-bubble
  /// kinds): the input gradients (B) and the weight gradients (W).
  double backwardInput = 0, backwardWeight = 0;
  /// The runtime's hand-offs between the stages' threads (0: no time): a
  /// compute instruction that follows another stream's on the device
  /// starts a turn after it (the core passes from one thread to the
  /// other); a message from a stage of the same rank that comes more than
  /// the spin after its receive began (the receiver has blocked) reaches
  /// it a wake late.
  ThreadHandoffs handoffs;
  /// The optimizer step starts once every peer's gradient has come: when
  /// the last of them reached its own optimizer step (after its last
  /// backward), on the wire where its rank is another; the copies are
  /// added to the step.
  TiedExchange tied;
};

/// The schedule played with these durations: sends take the transfer time
/// of their stage, a receive waits for its send, instructions of a stream
/// run one after the other, and streams on one device take turns on it.
/// A receive's span is its wait (from when the stream reached it to when
/// the message arrived).
struct SchedulePrediction {
  double stepTime = 0;
  /// Idle fraction of the devices over the step.
  double bubble = 0;
  /// Start and end of every instruction, per stream in order.
  struct Span {
    std::string what; // "forward", "backward", ...
    int64_t microBatch = -1;
    double begin = 0, end = 0;
  };
  llvm::SmallVector<llvm::SmallVector<Span>> spans;
};
SchedulePrediction predictSchedule(ScheduleOp schedule,
                                   llvm::ArrayRef<StageTimes> times);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PLANNER_SCHEDULESIMULATOR_H
