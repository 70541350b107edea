//===- ScheduleGenerator.h - Schedule kinds as data -------------*- C++ -*-===//
//
// A schedule kind is a generator: for K stages and M micro-batches it lists
// each stage's compute steps in order (forwards, backwards, ...). The
// transfers between stages, recompute and the optimizer step are placed
// around them by buildSchedule (Transforms/Schedule.h), the same for every
// kind, as PyTorch's pipelining schedules insert their communication after
// the compute order (DESIGN.md 6d, "phases and schedule kinds are data").
// A new schedule is a generator and a row of the registry.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_PLANNER_SCHEDULEGENERATOR_H
#define GPIPE_ANALYSIS_PLANNER_SCHEDULEGENERATOR_H

#include "Analysis/Planner/PipelinePlan.h"
#include "gpipe/common/Instruction.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace gpipe {

/// One compute step of a stage: `op` (Forward, Backward, or a backward in
/// two parts: BackwardInput then BackwardWeight) on micro-batch
/// `microBatch`. A kind that runs several stages on one device in turns
/// (interleaved) numbers each step's place in its device's order: `turn`
/// (-1: the stage has its device to itself).
struct ScheduleAction {
  InstructionOp op;
  int64_t microBatch;
  int64_t turn = -1;
};
using StageActions = llvm::SmallVector<ScheduleAction>;

/// Each stage's compute steps in order, for `numStages` stages and
/// `microBatches` micro-batches: every micro-batch's forward then its
/// backward once per stage. `virtualStages` v: the stages lie on
/// numStages / v devices in the kind's layout (deviceOfStage; 1: a device
/// each, or stages sharing a device without an order between them); only a
/// kind that interleaves reads it.
using ScheduleGenerator = llvm::SmallVector<StageActions> (*)(
    int64_t numStages, int64_t microBatches, int64_t virtualStages);

/// How an interleaving kind lays its stages on K devices: looped, stage s
/// on device s mod K (Megatron's interleaving: cpu:0,cpu:1,cpu:0,cpu:1),
/// or as a V, stage s on device s for s < K and on device 2K - 1 - s after
/// (ZB-V: cpu:0,cpu:1,cpu:1,cpu:0, the first and the last stage on one
/// device).
enum class StageLayout { Looped, V };

/// A schedule kind: its name (--schedule), its generator, the most
/// micro-batches stage `stage` of `numStages` keeps at once under it (in
/// closed form for the partitioner, which asks for every slice it weighs;
/// buildSchedule checks it against the generated order) and what it is.
struct ScheduleKindInfo {
  ScheduleKind kind;
  llvm::StringRef name;
  ScheduleGenerator generate;
  int64_t (*inFlight)(int64_t numStages, int64_t microBatches, int64_t stage,
                      int64_t virtualStages);
  llvm::StringRef summary;
  /// Whether its backwards run in two parts (the stages' code split by
  /// gpipe-split-backward-weights).
  bool splitsBackward = false;
  /// Whether it runs v > 1 stages on each device in turns
  /// (ScheduleAction::turn): the devices listed v times over, and the
  /// micro-batches a multiple of the devices (interleavingError).
  bool interleaves = false;
  /// Where an interleaving kind's stages lie.
  StageLayout layout = StageLayout::Looped;
};
/// Every schedule kind, in the order the plan search weighs them.
llvm::ArrayRef<ScheduleKindInfo> scheduleKinds();
const ScheduleKindInfo &scheduleKindInfo(ScheduleKind kind);
/// "gpipe or 1f1b": the kinds' names for messages.
std::string scheduleKindNames();

/// The virtual stages v of stages placed on `devices` (one (rank, device)
/// key per stage) in `layout`: looped, v > 1 where the list is its first
/// numStages / v entries, all different, repeated v times; as a V, 2 where
/// the list is its first half, all different, then the same backwards;
/// else 1.
int64_t virtualStagesOf(llvm::ArrayRef<std::string> devices,
                        StageLayout layout = StageLayout::Looped);

/// The device (0 to numStages / v - 1) of stage `stage` of `numStages`
/// laid out v to a device in `layout`.
int64_t deviceOfStage(int64_t stage, int64_t numStages, int64_t v,
                      StageLayout layout);

/// `devices` (a --devices list, one entry per device) listed for v stages
/// on each in `layout`: looped, the list v times over; as a V (v = 2), the
/// list then the list backwards.
std::string layDevices(llvm::ArrayRef<std::string> devices, int64_t v,
                       StageLayout layout);

/// Why an interleaving kind of `layout` cannot run `microBatches` on
/// stages placed on `devices` (as virtualStagesOf reads them); empty where
/// it can.
std::string interleavingError(llvm::ArrayRef<std::string> devices,
                              int64_t microBatches,
                              StageLayout layout = StageLayout::Looped);

/// The most micro-batches of `actions` whose forward has run and whose
/// backward (its weight part, when split) has not, at once.
int64_t maxInFlight(llvm::ArrayRef<ScheduleAction> actions);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_PLANNER_SCHEDULEGENERATOR_H
