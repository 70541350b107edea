//===- PipelinePlan.h - A training plan as a value --------------*- C++ -*-===//
//
// What the compiler decides for a training bundle, in one value: the cuts
// of the model into stages, each stage's device and rank, the data-parallel
// replicas, the micro-batches, the schedule and what each stage recomputes.
// The partitioner, the schedule and the report read the plan instead of
// parsing their own copies of the flags (DESIGN.md 6d, "a plan is a value").
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PLANNER_PIPELINEPLAN_H
#define GPIPE_ANALYSIS_PLANNER_PIPELINEPLAN_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace gpipe {

/// The order of a stage's forwards and backwards over the micro-batches.
enum class ScheduleKind {
  GPipe,
  OneFOneB,
  ZeroBubbleH1,
  Interleaved1F1B,
  ZeroBubbleV
};
/// What a stage's forward keeps for its backward. Auto: each stage
/// recomputes only if keeping its activations does not fit its device's
/// memory (the partitioner decides, PipelinePlan::autoRecompute).
enum class RecomputePolicy { Never, Always, ExceptLast, Auto };

/// A schedule kind's name (--schedule: "gpipe", "1f1b", "zb-h1"); none for
/// anything else.
std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef text);
/// "never", "always", "except-last" or "auto"; none for anything else.
std::optional<RecomputePolicy> parseRecomputePolicy(llvm::StringRef text);
llvm::StringRef toString(ScheduleKind kind);
llvm::StringRef toString(RecomputePolicy policy);

/// Whether stage `stage` of `numStages` runs its forward again before its
/// backward (except-last: every stage but the last, whose backward follows
/// its forward at once; auto: not known without the partitioner's choice,
/// false).
bool recomputesStage(RecomputePolicy policy, int64_t stage, int64_t numStages);

/// Micro-batches whose activations stage `stage` of `numStages` keeps at
/// once: all M under GPipe, at most K - stage under 1F1B (`virtualStages`:
/// the stages per device of an interleaved kind, 1 otherwise).
int64_t activationsAlive(ScheduleKind kind, int64_t microBatches, int64_t stage,
                         int64_t numStages, int64_t virtualStages = 1);

/// One stage of a plan: where it runs.
struct StagePlacement {
  std::string device; // "cpu:0", "cpu:2-3", "cuda:0"
  int64_t rank = 0;   // the MPI rank that runs it
  /// The stage's rank and device as one key ("r1:cpu:0"): stages with the
  /// same key share a device.
  std::string key() const;
};

/// Each placement's key (StagePlacement::key).
llvm::SmallVector<std::string>
deviceKeys(llvm::ArrayRef<StagePlacement> stages);
/// The rank a device as the user names it gives ("r1:cpu:0": 1; "cpu:0":
/// 0).
int64_t rankOfDeviceName(llvm::StringRef name);

struct PipelinePlan {
  /// The first layer of stages 1..K-1 (stage 0 starts at layer 0); empty
  /// until the partitioner has cut the model.
  llvm::SmallVector<int64_t> cuts;
  llvm::SmallVector<StagePlacement> stages;
  int64_t replicas = 1, microBatches = 1;
  ScheduleKind schedule = ScheduleKind::GPipe;
  RecomputePolicy recompute = RecomputePolicy::Never;
  /// Under RecomputePolicy::Auto, the stages that recompute (as the
  /// partitioner chose them for their memory); empty until it has.
  llvm::SmallVector<bool> autoRecompute;
  /// A plan for pipelined inference: micro-batches stream through the
  /// stages' forwards; nothing is kept for a backward.
  bool inference = false;

  int64_t numStages() const { return static_cast<int64_t>(stages.size()); }
  /// The stages' devices as --devices lists them ("cpu:0,cpu:1"; with
  /// rank prefixes when a stage is not on rank 0: "r0:cpu:0,r1:cpu:0").
  std::string deviceList() const;
  bool recomputes(int64_t stage) const {
    if (recompute == RecomputePolicy::Auto)
      return stage < static_cast<int64_t>(autoRecompute.size()) &&
             autoRecompute[stage];
    return recomputesStage(recompute, stage, numStages());
  }
  /// Each stage's (rank, device) as one key ("r1:cpu:0").
  llvm::SmallVector<std::string> deviceKeys() const;
  /// The stages per device where the devices repeat in order
  /// (virtualStagesOf), else 1.
  int64_t virtualStages() const;
  int64_t alive(int64_t stage) const;
};

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PLANNER_PIPELINEPLAN_H
