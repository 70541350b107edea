//===- InferencePipeline.h - From nn to pipelined inference -----*- C++ -*-===//
//
// The compiler's flow for an inference bundle of several stages: the
// model's inference rewrites, the cut (each stage's forward and messages
// balanced, docs/pipeline.md "Pipelined inference"), one lowered module per
// stage, and the predicted pace of micro-batches streaming through them.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_DRIVER_INFERENCEPIPELINE_H
#define GPIPE_DRIVER_INFERENCEPIPELINE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace gpipe {

struct InferencePipelineOptions {
  /// The stages' devices as the partitioner sees them ("cpu:0,cpu:1").
  std::string devices;
  std::string stages = "auto"; // or manual:i,j,...
  std::string profile, costTable;
  int64_t memoryPerDevice = 0;
  /// Attention fused (CPU stages only).
  bool fuseAttention = true;
  /// The MPI rank of each stage (empty: one process): a message between
  /// ranks costs the network's time (the profile's, else built-in figures)
  /// besides its copies.
  std::vector<int64_t> ranks;
  /// The same model as one stage on this device is predicted beside the
  /// pipeline ("cpu:0-1" for stages on cores 0 and 1); none: no comparison.
  std::optional<std::string> oneStageDevice;
};

struct InferenceStageReport {
  int64_t index = 0;
  std::string device;
  int64_t firstLayer = 0, endLayer = 0;
  int64_t parameters = 0; // elements
  int64_t flops = 0;      // per micro-batch
  /// Predicted seconds per micro-batch: the forward's kernels and loops,
  /// and receiving and sending its messages.
  double forward = 0, transfer = 0;
  int64_t memoryBytes = 0; // parameters, one micro-batch's results
  double busy() const { return forward + transfer; }
};

struct InferencePipelineResult {
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> stages;
  std::vector<InferenceStageReport> report;
  int64_t rows = 1; // of a micro-batch (the compiled batch)
  /// The same model as one stage on InferencePipelineOptions::
  /// oneStageDevice: its predicted seconds a micro-batch.
  std::optional<double> oneStage;
  std::string oneStageDevice;

  /// Streaming, a micro-batch leaves the last stage every interval(): the
  /// slowest stage's busy time; latency(): one micro-batch through all.
  double interval() const;
  double latency() const;
  /// Seconds for `chunks` micro-batches: the first through every stage,
  /// the rest one interval apart.
  double streamSeconds(int64_t chunks) const;
};

/// Partitions and lowers `module` (imported, not yet rewritten) into one
/// module per device of `o.devices`; the errors (a model that does not
/// fit, fewer layers than devices) are reported on the module.
mlir::FailureOr<InferencePipelineResult>
compileInferencePipeline(mlir::ModuleOp module,
                         const InferencePipelineOptions &o);

/// The predicted seconds a micro-batch of `rewritten` (past
/// buildInferenceModelPipeline) as one stage on `device`; none if it
/// cannot be priced there (the errors are reported on the module).
std::optional<double> predictOneStage(mlir::ModuleOp rewritten,
                                      const std::string &device,
                                      const InferencePipelineOptions &o);

/// A plan for pipelined inference on given cores: its stages' devices
/// and predicted pace (InferencePipelineResult's interval and latency).
struct InferencePlan {
  std::string devices; // the --devices list
  int64_t stages = 1;
  double interval = 0, latency = 0;
  bool fits = true;
};

/// The plans for `cores` (CPU cores of one host): one stage on all of
/// them and K stages of equal groups of contiguous cores for each K > 1
/// dividing their number, each cut by the partitioner and predicted;
/// fastest streaming pace (interval) first, those that do not fit last.
/// `imported`: the module as imported (it is cloned).
std::vector<InferencePlan>
weighInferencePlans(mlir::ModuleOp imported, const std::vector<int> &cores,
                    const InferencePipelineOptions &o);

/// The plans weighed, one per line, the first (the fastest) marked.
void printInferencePlans(const std::vector<InferencePlan> &plans, int64_t rows,
                         llvm::raw_ostream &os);

/// The per-stage table and the predicted pace, beside one stage on all the
/// cores where it was predicted.
void printInferenceReport(const InferencePipelineResult &r,
                          llvm::raw_ostream &os);

} // namespace gpipe

#endif // GPIPE_DRIVER_INFERENCEPIPELINE_H
