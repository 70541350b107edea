//===- PlanCostModel.cpp - One definition of a plan's times ---------------===//
#include "Analysis/Planner/PlanCostModel.h"
#include "Analysis/Planner/ScheduleGenerator.h"

#include <algorithm>

using namespace gpipe;

StageCost PlanCostModel::stageCost(int64_t s, const StageFacts &f) const {
  StageCost c;
  c.rank = plan.stages[s].rank;
  c.transfer = f.transfer;
  // What the kernels do not: the runtime's copies (inputs and messages
  // into the arenas, the stash out and back, gradients summed over the
  // micro-batches: in cache when they fit) and the optimizer's pass over
  // parameters, gradients and state, at memory bandwidth.
  double bw = f.memoryBandwidth;
  // A micro-batch's stash and messages are copied in cache when all they
  // touch stays there from a slot's write to its read a step of the
  // stage's traffic later: twice the micro-batch's bytes and the stage's
  // whole planned memory, in the cores' own cache (a one-stage GPT at M = 1:
  // 15 MiB of stash copied at the memory's rate; the main job's CNN at M =
  // 4, a 9.3 MiB stage, at 8-13 GB/s where its copies were priced in a
  // 16.5 MiB share of the level 3 at 43). The gradients' sum, touched every
  // micro-batch, runs at the rate the calibration measured the runtime's
  // sum at for the stage's gradients (StagePartitioner::gradientSumPass; the
  // README's MLP on one core at 32 micro-batches: 1.47 ms of sums, priced
  // 3.7 at a 4 MiB copy's rate: 70 GB/s against 28); without that
  // measurement, in cache when gradients and sum fit in the cores' whole
  // cache.
  // A forward whose backward comes next leaves its stash in place, in the
  // arena the two share: neither stores nor loads it (stashLoad).
  double touched = std::max(2 * (f.stashBytes + f.messages), f.footprint);
  double pass = f.passBandwidth(touched, f.stashCacheBytes);
  double copies = 2.0 * (f.stashBytes + f.messages / 2.0) / pass;
  c.stashLoad = 2.0 * f.stashBytes / pass;
  double sumPass = f.gradientSumPass ? *f.gradientSumPass
                                     : f.trainableBytes /
                                           f.passBandwidth(2 * f.trainableBytes,
                                                           f.cacheBytes);
  c.forward = f.forwardKernels + copies;
  c.forwardConversion = f.forwardConversion;
  c.backwardConversion = f.backwardConversion;
  // The first micro-batch's gradients are copied where the optimizer reads
  // them (a read and a write), the others added (two reads and a write):
  // 3 - 1/M passes a micro-batch on average (the README's MLP on both
  // cores at M = 1: 0.03 ms of gradients copied, priced as a sum).
  // A gradient a product adds into the sum itself (the CPU's products of
  // the weights' gradients) costs the product one read of the sum a
  // micro-batch but the first: 1 - 1/M passes.
  double m = static_cast<double>(plan.microBatches);
  double sumPasses = (1 - f.productSummedShare) * (3.0 - 1.0 / m) +
                     f.productSummedShare * (1.0 - 1.0 / m);
  c.backward = f.backwardKernels + copies + sumPasses * sumPass;
  c.backwardWeight =
      std::min(c.backward, f.backwardWeightKernels + sumPasses * sumPass);
  c.backwardInput = c.backward - c.backwardWeight;
  // SGD reads parameters and gradients and writes parameters; each state
  // tensor (momentum, Adam's moments) is one more read and write.
  double passes = 3 + 2 * static_cast<double>(optimizerSlots);
  c.optimizer = f.optimizerKernel ? *f.optimizerKernel * passes / 3
                                  : passes * f.trainableBytes / bw;
  // Between ranks, messages cross the network after their send; the
  // replicas' gradient sum runs before the optimizer step.
  int64_t k = plan.numStages();
  if (s + 1 < k && plan.stages[s + 1].rank != c.rank)
    c.activationWire =
        network.networkLatency +
        static_cast<double>(f.outMessageBytes) / network.networkBandwidth;
  if (s > 0 && plan.stages[s - 1].rank != c.rank)
    c.gradientWire = network.networkLatency +
                     static_cast<double>(f.inBytes) / network.networkBandwidth;
  // The runtime copies the gradients into its buckets and back around the
  // sum (a read and a write of them each way).
  if (plan.replicas > 1)
    c.allReduce = allReduceTime(f.trainableBytes, plan.replicas, network) +
                  4 * f.trainableBytes / bw;
  c.optimizer += c.allReduce;
  c.handoffs = f.handoffs;
  // A tied weight's gradient exchange (StreamRunner::sumTiedGradients):
  // the gradient copied to the host and into a message to each peer, each
  // peer's added to it, the sum copied back (a read and a write each, the
  // additions two reads and a write): 4 + 5 x peers passes of its bytes.
  if (!f.tiedPeers.empty()) {
    double peers = static_cast<double>(f.tiedPeers.size());
    c.tied.peers = f.tiedPeers;
    c.tied.copies = (4 + 5 * peers) * f.tiedBytes /
                    f.passBandwidth(3 * f.tiedBytes, f.cacheBytes);
    c.tied.wire =
        network.networkLatency + f.tiedBytes / network.networkBandwidth;
  }
  return c;
}

SchedulePrediction
PlanCostModel::predict(ScheduleOp schedule,
                       llvm::ArrayRef<StageCost> stages) const {
  llvm::SmallVector<StageTimes> times;
  for (const StageCost &c : stages)
    times.push_back(c.times());
  return predictSchedule(schedule, times);
}

PlanCostModel::FillDrain PlanCostModel::fillDrainBubble() const {
  // An interleaved schedule's K devices run v stages each: a looped one's
  // fill and drain are 1/v as long.
  const ScheduleKindInfo &info = scheduleKindInfo(plan.schedule);
  double v = info.interleaves ? static_cast<double>(plan.virtualStages()) : 1;
  double k = static_cast<double>(plan.numStages()) / v;
  double m = static_cast<double>(plan.microBatches);
  if (v > 1 && info.layout == StageLayout::Looped)
    return {(k - 1) / (v * m + k - 1), "(K-1)/(vM+K-1)"};
  return {(k - 1) / (m + k - 1), "(K-1)/(M+K-1)"};
}
