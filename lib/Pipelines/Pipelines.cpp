//===- Pipelines.cpp - gpipe's pass pipelines -----------------------------===//
#include "Pipelines/Pipelines.h"

#include "Analysis/CostModel.h"

#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

bool gpipe::usesCudaDevice(StringRef devices) {
  llvm::Expected<std::vector<Device>> parsed = parseDevices(devices);
  if (!parsed) { // the partition reports a malformed list
    llvm::consumeError(parsed.takeError());
    return false;
  }
  return llvm::any_of(
      *parsed, [](const Device &d) { return d.kind == DeviceKind::Cuda; });
}

void gpipe::buildInferenceModelPipeline(OpPassManager &pm, bool fuseAttention) {
  pm.addPass(createFuseGelu());
  if (fuseAttention)
    pm.addPass(createFuseAttention());
  pm.addPass(createFoldMatMulTranspose());
  pm.addPass(createSetInferenceMode());
}
void gpipe::buildLowerInferenceStagePipeline(OpPassManager &pm, int64_t stage) {
  pm.addPass(createMarkBatchPlacement());
  pm.addPass(createConvertElementwiseToLinalg());
  pm.addPass(createLinalgElementwiseOpFusionPass());
  LowerStageOptions lower;
  lower.entryName = ("gpipe_stage" + Twine(stage) + "_forward").str();
  pm.addPass(createLowerStage(lower));
}
void gpipe::buildInferencePipeline(OpPassManager &pm, bool fuseAttention) {
  buildInferenceModelPipeline(pm, fuseAttention);
  buildLowerInferenceStagePipeline(pm, 0);
}

void gpipe::buildTrainingModelPipeline(
    OpPassManager &pm, const AppendLossOptions &loss,
    std::optional<FuseAttentionOptions> attention) {
  pm.addPass(createFuseGelu());
  if (attention)
    pm.addPass(createFuseAttention(*attention));
  pm.addPass(createFoldMatMulTranspose());
  pm.addPass(createAppendLoss(loss));
}

void gpipe::buildPartitionPipeline(
    OpPassManager &pm, const AppendLossOptions &loss,
    const PartitionOptions &partition,
    std::optional<FuseAttentionOptions> attention) {
  if (usesCudaDevice(partition.deviceList))
    attention.reset();
  else if (!attention)
    attention = FuseAttentionOptions{};
  buildTrainingModelPipeline(pm, loss, attention);
  pm.addPass(createPartition(partition));
}

void gpipe::buildPartitionPipeline(OpPassManager &pm,
                                   const PartitionPipelineOptions &o) {
  AppendLossOptions loss;
  loss.loss = o.loss;
  PartitionOptions partition;
  partition.deviceList = o.devices;
  partition.stages = o.stages;
  partition.microBatches = o.microBatches;
  partition.schedule = o.schedule;
  partition.recompute = o.recompute;
  partition.optimizerSlots = o.optimizerSlots;
  partition.profile = o.profile;
  partition.costTable = o.costTable;
  partition.memoryPerDevice = o.memoryPerDevice;
  buildPartitionPipeline(pm, loss, partition);
}

void gpipe::buildTrainStagePipeline(OpPassManager &pm,
                                    const SplitForwardBackwardOptions &split,
                                    const AppendOptimizerOptions &optimizer) {
  pm.addPass(createAutodiff());
  // The input gradient of x W is g W^T: a Gemm reading W transposed, not
  // a transposed copy of W (a 4096 x 1024 weight: 26 ms against 1.2).
  pm.addPass(createFoldMatMulTranspose());
  pm.addPass(createSplitForwardBackward(split));
  pm.addPass(createAppendOptimizer(optimizer));
}

void gpipe::buildTrainStagePipeline(OpPassManager &pm,
                                    const TrainStagePipelineOptions &o) {
  SplitForwardBackwardOptions split;
  split.recompute = o.recompute;
  split.lastStage = o.lastStage;
  AppendOptimizerOptions optimizer;
  optimizer.optimizer = o.optimizer;
  optimizer.momentum = o.momentum;
  optimizer.nesterov = o.nesterov;
  buildTrainStagePipeline(pm, split, optimizer);
}

void gpipe::buildLowerTrainingStagePipeline(
    OpPassManager &pm, const LowerTrainingStagePipelineOptions &o) {
  pm.addPass(createConvertElementwiseToLinalg());
  pm.addPass(createLinalgElementwiseOpFusionPass());
  llvm::SmallVector<StringRef> phases{"forward", "backward", "optimizer"};
  if (o.splitBackward)
    phases = {"forward", "backward_input", "backward_weight", "optimizer"};
  for (StringRef phase : phases) {
    LowerStageOptions lower;
    lower.functionName = phase.str();
    lower.entryName =
        ("gpipe_stage" + Twine(o.stage.getValue()) + "_" + phase).str();
    pm.addPass(createLowerStage(lower));
  }
}

void gpipe::registerGPipePipelines() {
  PassPipelineRegistration<>(
      "gpipe-inference-pipeline",
      "An imported nn module to one lowered inference stage",
      [](OpPassManager &pm) { buildInferencePipeline(pm); });
  PassPipelineRegistration<PartitionPipelineOptions>(
      "gpipe-partition-pipeline",
      "Append the loss and cut the model into pipeline stages",
      [](OpPassManager &pm, const PartitionPipelineOptions &o) {
        buildPartitionPipeline(pm, o);
      });
  PassPipelineRegistration<TrainStagePipelineOptions>(
      "gpipe-train-stage-pipeline",
      "One outlined stage: autodiff, forward/backward split, optimizer",
      [](OpPassManager &pm, const TrainStagePipelineOptions &o) {
        buildTrainStagePipeline(pm, o);
      });
  PassPipelineRegistration<LowerTrainingStagePipelineOptions>(
      "gpipe-lower-training-stage-pipeline",
      "A trained stage's phases lowered to entry points on arenas",
      buildLowerTrainingStagePipeline);
}
