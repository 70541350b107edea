//===- StagePartition.h - Cutting the layers into stages ---------*- C++
//-*-===//
//
// The cuts of a plan: a dynamic program over the cut positions of a
// LayerTable that minimizes the slowest stage's time per micro-batch
// (forward, backward, the forward again under recompute, the transfers
// across its cuts) within each device's memory (parameters with their
// gradients and optimizer state, the activations the schedule keeps
// alive). The Partition pass and the plan search both cut with it.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PLANNER_STAGEPARTITION_H
#define GPIPE_ANALYSIS_PLANNER_STAGEPARTITION_H

#include "Analysis/Planner/LayerTable.h"
#include "Analysis/Planner/PipelinePlan.h"

#include "mlir/Support/LogicalResult.h"

#include <algorithm>

namespace gpipe {

/// What the partitioner knows of a candidate stage, per micro-batch.
struct StageSlice {
  double forward = 0, backward = 0; // seconds (backward with recompute)
  /// Of the backward, the weights' gradients (LayerTable::weightShare).
  double backwardWeight = 0;
  double transfer = 0; // seconds to send and receive its cuts
  /// Bytes of the activation messages it receives and sends, as sent
  /// (LayerTable::crossMessageBytes); its gradients' are the cuts' bytes.
  double inMessageBytes = 0, outMessageBytes = 0;
  double memory = 0; // bytes at the schedule's peak
  /// Bytes kept per micro-batch from its forward to its backward (the
  /// stash, or the stage input with recompute) and, under a backward in
  /// two parts, from the input part to the weight part: what the runtime
  /// copies out and back.
  double kept = 0;
  /// Seconds once a step: the first forward's and the first backward's
  /// parameter conversions (LayerTable::conversionSeconds).
  double forwardConversion = 0, backwardConversion = 0;
  /// Bytes of the stage's trainable parameters.
  double trainableBytes = 0;
  /// Of a pass of the runtime's gradient sum over them, the share of the
  /// weights whose gradient a product adds into the sum itself
  /// (LayerTable::productSummedBytes; on a GPU none).
  double productSummedShare = 0;
  /// Whether the stage runs its forward again before its backward (under
  /// RecomputePolicy::Auto: only where keeping its activations would not
  /// fit the device's memory).
  bool recomputes = false;
  double time() const { return forward + backward + transfer; }
};

class StagePartitioner {
public:
  /// One profile per stage of `plan` (its devices); `rows`: the
  /// micro-batch's rows.
  StagePartitioner(const LayerTable &table, const PipelinePlan &plan,
                   llvm::ArrayRef<DeviceProfile> profiles, int64_t rows);

  /// Stage `stage` holding layers [begin, end), recomputing as the plan
  /// says (auto: if keeping the activations does not fit its device).
  StageSlice slice(int64_t stage, int64_t begin, int64_t end) const;
  /// The same with recompute given.
  StageSlice slice(int64_t stage, int64_t begin, int64_t end,
                   bool recomputes) const;
  /// What each stage recomputes with cuts `cuts` (the plan's policy, or
  /// auto's choice).
  llvm::SmallVector<bool> recomputeChoices(llvm::ArrayRef<int64_t> cuts) const;

  /// Seconds of one pass of the runtime's gradient sum over the trainable
  /// parameters of that stage: each layer's bytes (its parameters taken as
  /// one tensor) over its threads (DeviceProfile::gradientSumThreads), at
  /// the rate for the gradients and their sum (gradientSumRate); none: not
  /// measured for them. Apart from slice(): the cuts do not depend on it,
  /// and solve() slices every range.
  std::optional<double> gradientSumPass(int64_t stage, int64_t begin,
                                        int64_t end) const;

  /// Seconds of layer i's forward and backward on stage `stage`'s device,
  /// a micro-batch's mean over a step: its kernels or loops (what slice()
  /// sums for them; a stage that `recomputes` runs the forward again in its
  /// backward phase, under the op's name) and its share of its weights'
  /// conversion, which the step's first micro-batch pays (without the
  /// stage's own terms: passes beyond the last cache level, messages). The
  /// prediction `gpipe-run --profile-ops` compares each op's measured mean
  /// times with.
  std::pair<double, double> layerSeconds(int64_t stage, int64_t i,
                                         bool recomputes) const {
    double m = static_cast<double>(std::max<int64_t>(plan.microBatches, 1));
    double fwd = forward[stage][i + 1] - forward[stage][i];
    double bwd = backward[stage][i + 1] - backward[stage][i];
    return {
        fwd +
            (forwardConversion[stage][i + 1] - forwardConversion[stage][i]) / m,
        bwd + (recomputes ? fwd : 0.0) +
            (backwardConversion[stage][i + 1] - backwardConversion[stage][i]) /
                m};
  }

  /// The cuts (first layer of stages 1..K-1) that minimize the slowest
  /// stage; failure if no partition fits memory (withMemory) or the model
  /// has fewer layers than stages.
  mlir::FailureOr<llvm::SmallVector<int64_t>> solve(bool withMemory) const;

private:
  const LayerTable &table;
  const PipelinePlan &plan;
  llvm::SmallVector<DeviceProfile, 2> profiles;
  int64_t rows;
  // [stage][layer] seconds, prefix sums: forward[s][e] is layers [0, e);
  // the conversions once a step likewise.
  llvm::SmallVector<llvm::SmallVector<double>> forward, backward,
      backwardWeight;
  llvm::SmallVector<llvm::SmallVector<double>> forwardConversion,
      backwardConversion;
  llvm::SmallVector<double> params, activations; // prefix sums
  /// Prefix sums of the results of the layers with weights (their output
  /// gradients, which a split backward's weight part keeps).
  llvm::SmallVector<double> weightedResults;
  /// Prefix sums of the trainable bytes, and per stage of each layer's
  /// trainable bytes over the threads its gradients are summed on.
  llvm::SmallVector<double> trainable;
  llvm::SmallVector<llvm::SmallVector<double>> sumThreadBytes;
  /// Per stage, prefix sums of sumThreadBytes' part of the weights a
  /// product sums itself (StageSlice::productSummedShare).
  llvm::SmallVector<llvm::SmallVector<double>> sumBytes;
  /// Prefix sums of the bytes the fitted ops move, forward and backward.
  llvm::SmallVector<double> forwardBytes, backwardBytes;
  /// Each stage's micro-batches alive at once (PipelinePlan::alive), once:
  /// solve() weighs every slice of every stage.
  llvm::SmallVector<int64_t> alive;
  /// Whether every layer's forward and backward seconds are >= 0 on every
  /// stage's device (solve() prunes with them).
  bool layerTimesNonNegative = true;
};

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PLANNER_STAGEPARTITION_H
