//===- Schedule.h - Building and timing static schedules --------*- C++ -*-===//
#ifndef GPIPE_TRANSFORMS_SCHEDULE_H
#define GPIPE_TRANSFORMS_SCHEDULE_H

#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/ScheduleSimulator.h"
#include "GPipe/IR/GPipeOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace gpipe {

/// What a schedule is built for: one entry per stage in the vectors.
struct ScheduleRequest {
  ScheduleKind kind = ScheduleKind::GPipe;
  int64_t microBatches = 1;
  llvm::SmallVector<std::string> devices;
  /// Each stage's MPI rank (empty: all on rank 0); with the device, what
  /// an interleaving kind reads as the stage's device.
  llvm::SmallVector<int64_t> ranks;
  llvm::SmallVector<bool> recompute;
  /// Optional memory figures of each stage (see gpipe.stream).
  struct Memory {
    std::optional<int64_t> staticBytes, stashBytes, limit;
  };
  llvm::SmallVector<Memory> memory;
};

/// Each stage's (rank, device) key of `request` ("r0:cpu:0").
llvm::SmallVector<std::string> deviceKeys(const ScheduleRequest &request);

/// Builds the gpipe.schedule for `request` at the builder's insertion
/// point. The caller verifies it; an interleaving kind needs a layout that
/// interleavingError accepts.
ScheduleOp buildSchedule(mlir::OpBuilder &builder, mlir::Location loc,
                         const ScheduleRequest &request);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_SCHEDULE_H
