//===- PlanCostModel.h - One definition of a plan's times -------*- C++ -*-===//
//
// What a plan costs: each stage's seconds per micro-batch (its kernels, the
// runtime's copies, the transfers), per step (the optimizer, the replicas'
// gradient sum) and on the wire between ranks; the step the schedule makes
// of them (ScheduleSimulator.h); the fill-drain bubble and the baseline the
// report compares with. The driver's report and the bundle's predicted step
// use it; the partitioner's search is next (DESIGN.md 6d).
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PLANNER_PLANCOSTMODEL_H
#define GPIPE_ANALYSIS_PLANNER_PLANCOSTMODEL_H

#include "Analysis/CostModel.h"
#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/ScheduleSimulator.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>

namespace gpipe {

/// What the cost of one stage is computed from.
struct StageFacts {
  /// The kernels' seconds per micro-batch (forward; backward with any
  /// recompute) and the stage's transfer time, from the partitioner.
  double forwardKernels = 0, backwardKernels = 0, transfer = 0;
  /// Of backwardKernels, the weights' gradients (StageSlice).
  double backwardWeightKernels = 0;
  /// Seconds once a step: the parameters the first forward (backward)
  /// converts to its kernels' layouts (StageSlice).
  double forwardConversion = 0, backwardConversion = 0;
  /// Bytes per micro-batch the runtime copies: the stash kept for the
  /// backward, the messages in and out (`messages` counts both ways).
  double stashBytes = 0, messages = 0, inBytes = 0, outBytes = 0;
  /// Of those, the activation messages in and out as sent (a tensor the
  /// receiver only multiplies in bfloat16 at half its bytes); inBytes and
  /// outBytes are the activations' own, and their gradients'.
  double inMessageBytes = 0, outMessageBytes = 0;
  /// Bytes of the trainable parameters (gradients and state alike).
  double trainableBytes = 0;
  /// Of the gradient sum's passes, the share a product adds into the sum
  /// itself (StageSlice::productSummedShare): one read a micro-batch but
  /// the first, not a copy and additions.
  double productSummedShare = 0;
  /// Seconds of one pass of the runtime's gradient sum over them as
  /// calibrated (StagePartitioner::gradientSumPass); none: a pass at
  /// passBandwidth.
  std::optional<double> gradientSumPass;
  /// Bytes the stage's plan holds at its peak (arenas, parameters, the
  /// stash of every micro-batch alive, messages; 0: not known): what
  /// passes through the caches between a stash slot's write (a forward)
  /// and its read (that micro-batch's backward).
  double footprint = 0;
  /// The stage's device's memory bandwidth, its cores' cache and the rate
  /// of a copy within it (DeviceProfile::memoryBandwidth, cacheBytes and
  /// linkBandwidth, a 4 MiB copy's), the cache a stash slot stays in
  /// (DeviceProfile::stashCache) and the runtime's copies' rate beyond the
  /// caches (copyBandwidth; 0: not measured): the runtime's passes (a
  /// micro-batch's stash and message copies, the gradients' sum over the
  /// micro-batches) run at passBandwidth of what they touch.
  double memoryBandwidth = 1, cacheBytes = 0, cachedCopyBandwidth = 0;
  double stashCacheBytes = 0, copyMemoryBandwidth = 0;
  double passBandwidth(double workingSet, double cache) const {
    return gpipe::passBandwidth(workingSet, cache, cachedCopyBandwidth,
                                copyMemoryBandwidth > 0 ? copyMemoryBandwidth
                                                        : memoryBandwidth);
  }
  /// The optimizer step's seconds as calibrated (kernel family
  /// "optimizer", timed for SGD: a pass over parameters and gradients),
  /// when the device's profile has them; else a pass at memory bandwidth.
  std::optional<double> optimizerKernel;
  /// The device's thread hand-offs (DeviceProfile::handoffs).
  ThreadHandoffs handoffs;
  /// The other stages training a copy of one of this stage's weights, and
  /// the bytes of those weights (float32) on this stage.
  llvm::SmallVector<int64_t> tiedPeers;
  double tiedBytes = 0;
  /// Stage `self` trains a copy of a weight of `bytes` that `stages` (in
  /// order, `self` among them) train.
  void addTiedWeight(int64_t self, llvm::ArrayRef<int64_t> stages,
                     double bytes) {
    tiedBytes += bytes;
    for (int64_t peer : stages)
      if (peer != self && !llvm::is_contained(tiedPeers, peer))
        tiedPeers.push_back(peer);
  }
};

/// A stage's predicted seconds: forward, backward and transfer per
/// micro-batch, optimizer per step (the all-reduce included), the network
/// time of a message to the next (previous) stage's rank.
struct StageCost {
  double forward = 0, backward = 0, transfer = 0, optimizer = 0;
  double allReduce = 0, activationWire = 0, gradientWire = 0;
  int64_t rank = 0;
  /// Added to a step's first forward (backward): parameter conversions.
  double forwardConversion = 0, backwardConversion = 0;
  /// Of the backward: loading the stash (StageTimes::stashLoad).
  double stashLoad = 0;
  /// The backward split in two as a zero-bubble schedule runs it: the
  /// input's gradient (B, with the stash's copies and any recompute) and
  /// the weights' (W, with the gradients' sums); they add up to backward.
  double backwardInput = 0, backwardWeight = 0;
  /// The device's thread hand-offs (StageTimes::handoffs).
  ThreadHandoffs handoffs;
  /// The tied weights' gradient exchange (StageTimes::tied).
  TiedExchange tied;
  StageTimes times() const {
    // By name: a field added to StageTimes cannot shift the others.
    StageTimes t;
    t.forward = forward;
    t.backward = backward;
    t.transfer = transfer;
    t.optimizer = optimizer;
    t.activationWire = activationWire;
    t.gradientWire = gradientWire;
    t.rank = rank;
    t.firstForward = forwardConversion;
    t.firstBackward = backwardConversion;
    t.stashLoad = stashLoad;
    t.backwardInput = backwardInput;
    t.backwardWeight = backwardWeight;
    t.handoffs = handoffs;
    t.tied = tied;
    return t;
  }
};

class PlanCostModel {
public:
  /// `network`: the figures between ranks; `optimizerSlots`: state tensors
  /// per parameter (0 plain SGD, 1 momentum, 2 Adam).
  PlanCostModel(const PipelinePlan &plan, const DeviceProfile &network,
                int64_t optimizerSlots)
      : plan(plan), network(network), optimizerSlots(optimizerSlots) {}

  StageCost stageCost(int64_t stage, const StageFacts &facts) const;

  /// The step the schedule makes of the stages' costs.
  SchedulePrediction predict(ScheduleOp schedule,
                             llvm::ArrayRef<StageCost> stages) const;

  /// The idle share of a fill-drain pipeline of K stages and M
  /// micro-batches with equal stages, `formula` as printed: (K-1)/(M+K-1);
  /// over K devices of v stages each interleaved in a loop, (K-1)/(vM+K-1)
  /// (ZB-V's reference is 1F1B's over its K devices).
  struct FillDrain {
    double bubble;
    llvm::StringRef formula;
  };
  FillDrain fillDrainBubble() const;

private:
  const PipelinePlan &plan;
  DeviceProfile network;
  int64_t optimizerSlots;
};

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PLANNER_PLANCOSTMODEL_H
