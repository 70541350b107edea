//===- Pipelines.h - gpipe's pass pipelines ---------------------*- C++ -*-===//
//
// The compiler's pass pipelines, built in one place and registered with
// MLIR so that gpipe-opt runs them on .mlir files like any pass:
//
//   gpipe-opt model.mlir --gpipe-inference-pipeline
//   gpipe-opt model.mlir --gpipe-partition-pipeline='devices=cpu:0,cpu:1'
//   gpipe-opt stage.mlir --gpipe-train-stage-pipeline='last-stage=true'
//   gpipe-opt stage.mlir --gpipe-lower-training-stage-pipeline='stage=0'
//
// The training driver (Driver/TrainingPipeline.h) runs the same builders
// on the imported model and on each outlined stage.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_PIPELINES_PIPELINES_H
#define GPIPE_PIPELINES_PIPELINES_H

#include "Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <optional>
#include <string>

namespace gpipe {

/// The rewrites of an imported nn module before its layers are priced and
/// cut (GELU and, with `attention`, attention fused; MatMul by W^T and
/// its bias as a Gemm) and the loss appended: what the partitioner, the
/// plan search and the calibration's layer tables all see. Attention is
/// fused for CPU devices only (none: the CUDA backend has no attention
/// kernel yet and runs the unfused ops; usesCudaDevice).
void buildTrainingModelPipeline(
    mlir::OpPassManager &pm, const AppendLossOptions &loss,
    std::optional<FuseAttentionOptions> attention = FuseAttentionOptions{});

/// Whether a --devices list names a GPU (cuda:N), whose stages run
/// attention unfused.
bool usesCudaDevice(llvm::StringRef devices);

/// An imported nn module to one lowered inference stage.
void buildInferencePipeline(mlir::OpPassManager &pm, bool fuseAttention = true);
/// Its two halves, for pipelined inference (Driver/InferencePipeline.h):
/// the model's rewrites (GELU and attention fused, MatMul by W^T as a
/// Gemm, dropout and BatchNorm in their inference behaviour), which the
/// partitioner prices and cuts; and one stage's lowering, entry
/// gpipe_stage<stage>_forward.
void buildInferenceModelPipeline(mlir::OpPassManager &pm,
                                 bool fuseAttention = true);
void buildLowerInferenceStagePipeline(mlir::OpPassManager &pm, int64_t stage);

struct PartitionPipelineOptions
    : public mlir::PassPipelineOptions<PartitionPipelineOptions> {
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("The loss appended to the model"),
                           llvm::cl::init("cross-entropy")};
  Option<std::string> devices{*this, "devices",
                              llvm::cl::desc("The pipeline's devices"),
                              llvm::cl::init("cpu:0")};
  Option<std::string> stages{*this, "stages",
                             llvm::cl::desc("auto or manual:K"),
                             llvm::cl::init("auto")};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::desc("Micro-batches per step"),
                               llvm::cl::init(1)};
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("gpipe or 1f1b"),
                               llvm::cl::init("gpipe")};
  Option<std::string> recompute{
      *this, "recompute", llvm::cl::desc("never, always, except-last, auto"),
      llvm::cl::init("never")};
  Option<int64_t> optimizerSlots{
      *this, "optimizer-slots",
      llvm::cl::desc("Optimizer state tensors per parameter"),
      llvm::cl::init(0)};
  Option<std::string> profile{*this, "profile",
                              llvm::cl::desc("A device profile (JSON)"),
                              llvm::cl::init("")};
  Option<std::string> costTable{*this, "cost-table",
                                llvm::cl::desc("Measured per-op costs (CSV)"),
                                llvm::cl::init("")};
  Option<int64_t> memoryPerDevice{
      *this, "memory-per-device",
      llvm::cl::desc("Bytes of memory of each device (0: the profile's)"),
      llvm::cl::init(0)};
};

/// The model with its loss, cut into gpipe.stage ops (one per device).
void buildPartitionPipeline(mlir::OpPassManager &pm,
                            const PartitionPipelineOptions &options);

struct TrainStagePipelineOptions
    : public mlir::PassPipelineOptions<TrainStagePipelineOptions> {
  Option<std::string> recompute{*this, "recompute",
                                llvm::cl::desc("never, always, except-last"),
                                llvm::cl::init("never")};
  Option<bool> lastStage{*this, "last-stage",
                         llvm::cl::desc("The stage computes the loss"),
                         llvm::cl::init(true)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("sgd, adam or adamw"),
                                llvm::cl::init("sgd")};
  Option<bool> momentum{*this, "momentum",
                        llvm::cl::desc("SGD with a momentum buffer"),
                        llvm::cl::init(false)};
  Option<bool> nesterov{*this, "nesterov", llvm::cl::desc("Nesterov momentum"),
                        llvm::cl::init(false)};
};

/// One outlined stage module: autodiff, split into forward and backward,
/// the optimizer phase.
void buildTrainStagePipeline(mlir::OpPassManager &pm,
                             const TrainStagePipelineOptions &options);

/// The same two pipelines from the passes' own option structs, which the
/// training driver holds (the registered pipelines above convert to them).
/// `attention` configures attention's fusion on CPU devices (none: the
/// pass's defaults).
void buildPartitionPipeline(
    mlir::OpPassManager &pm, const AppendLossOptions &loss,
    const PartitionOptions &partition,
    std::optional<FuseAttentionOptions> attention = std::nullopt);
void buildTrainStagePipeline(mlir::OpPassManager &pm,
                             const SplitForwardBackwardOptions &split,
                             const AppendOptimizerOptions &optimizer);

struct LowerTrainingStagePipelineOptions
    : public mlir::PassPipelineOptions<LowerTrainingStagePipelineOptions> {
  Option<int64_t> stage{*this, "stage",
                        llvm::cl::desc("The stage's index (entry names)"),
                        llvm::cl::init(0)};
  Option<bool> splitBackward{
      *this, "split-backward",
      llvm::cl::desc("The backward is in two parts (gpipe-split-backward-"
                     "weights): lower @backward_input and @backward_weight"),
      llvm::cl::init(false)};
};

/// A trained stage's forward, backward (or its two parts) and optimizer
/// phases lowered to entry points on arenas (gpipe_stage<K>_<phase>).
void buildLowerTrainingStagePipeline(
    mlir::OpPassManager &pm, const LowerTrainingStagePipelineOptions &options);

/// Registers the pipelines above with MLIR (gpipe-opt calls it once).
void registerGPipePipelines();

} // namespace gpipe

#endif // GPIPE_PIPELINES_PIPELINES_H
