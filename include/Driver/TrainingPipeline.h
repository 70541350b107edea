//===- TrainingPipeline.h - From nn to compiled stages ----------*- C++ -*-===//
//
// The compiler's training flow, shared by gpipe-opt's phases: loss,
// partition, one module per stage (autodiff, forward/backward split,
// optimizer, lowering), the static schedule with its memory figures and
// its predicted timing.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_DRIVER_TRAININGPIPELINE_H
#define GPIPE_DRIVER_TRAININGPIPELINE_H

#include "Analysis/Planner/PlanCostModel.h"
#include "Transforms/Passes.h"
#include "Transforms/Schedule.h"
#include "gpipe/common/TimelineReport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace gpipe {

struct TrainingPipelineOptions {
  AppendLossOptions loss;
  /// The partition: devices as the partitioner sees them, stages,
  /// micro-batches, schedule, recompute, cost model inputs (its
  /// optimizerSlots follow from `optimizer`).
  PartitionOptions partition;
  AppendOptimizerOptions optimizer;
  /// Attention's fusion on CPU devices (none: the pass's defaults).
  std::optional<FuseAttentionOptions> attention;
  /// One per stage, as the runtime pins them ("cpu" for the unpinned host
  /// when no devices were given).
  std::vector<std::string> bundleDevices{"cpu"};
  /// The MPI rank of each stage (empty: one process) and the data-parallel
  /// replicas: messages between ranks and the gradient all-reduce cost
  /// network time in the prediction.
  std::vector<int64_t> ranks;
  int64_t dataParallel = 1;
};

/// Where to stop and what to print (gpipe-opt --emit).
enum class TrainingStop { Stages, Autodiff, Schedule, Lowered };

/// One row of the per-stage report.
struct StageReport {
  int64_t index = 0;
  std::string device;
  /// Whether the backward recomputes the forward.
  bool recompute = false;
  int64_t firstLayer = 0, endLayer = 0, ops = 0;
  int64_t parameters = 0; // trainable elements
  int64_t flops = 0;      // forward, per micro-batch
  /// Predicted seconds (PlanCostModel): per micro-batch forward, backward
  /// and transfers, per step the optimizer (the all-reduce included), the
  /// stage's rank and its messages' network times.
  StageCost cost;
  int64_t peakBytes = 0; // from the verified schedule
  int64_t maxAlive = 0;
};

struct TrainingPipelineResult {
  /// The plan compiled, and each stage's cost under it (PlanCostModel).
  PipelinePlan plan;
  llvm::SmallVector<StageCost> costs;
  /// Lowered stage modules, in order (TrainingStop::Lowered).
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> stages;
  /// The manifest's "schedule" object.
  llvm::json::Value schedule = nullptr;
  std::vector<StageReport> report;
  SchedulePrediction prediction;
};

/// Runs the flow on the imported module up to `stop`; for the earlier
/// stops prints the IR of that phase to `os` and returns an empty result.
mlir::FailureOr<TrainingPipelineResult>
compileTrainingPipeline(mlir::ModuleOp module,
                        const TrainingPipelineOptions &options,
                        TrainingStop stop, llvm::raw_ostream &os);

/// The per-stage table and the predicted step and bubble.
void printStageReport(const TrainingPipelineResult &result,
                      llvm::raw_ostream &os);

/// A self-contained HTML page: `preface` (lines of text) and the table,
/// and an SVG timeline of the predicted schedule (one row per device,
/// forward and backward boxes per micro-batch).
std::string stageReportHTML(const TrainingPipelineResult &result,
                            llvm::StringRef modelName,
                            llvm::StringRef preface = "");

/// "model.onnx: 2 stages, gpipe schedule, 8 micro-batches".
std::string reportTitle(llvm::StringRef modelFile,
                        const TrainingPipelineResult &result);

/// The predicted step as a timeline (common/TimelineReport.h).
Timeline predictedTimeline(const TrainingPipelineResult &result,
                           llvm::StringRef title);

} // namespace gpipe

#endif // GPIPE_DRIVER_TRAININGPIPELINE_H
