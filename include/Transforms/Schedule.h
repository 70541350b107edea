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
  llvm::SmallVector<bool> recompute;
  /// Optional memory figures of each stage (see gpipe.stream).
  struct Memory {
    std::optional<int64_t> staticBytes, stashBytes, limit;
  };
  llvm::SmallVector<Memory> memory;
};

/// Builds the gpipe.schedule for `request` at the builder's insertion
/// point. The caller verifies it.
ScheduleOp buildSchedule(mlir::OpBuilder &builder, mlir::Location loc,
                         const ScheduleRequest &request);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_SCHEDULE_H
