//===- Pipelines.cpp - gpipe's pass pipelines -----------------------------===//
#include "Pipelines/Pipelines.h"

#include "Transforms/Passes.h"

#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void gpipe::buildInferencePipeline(OpPassManager &pm) {
  pm.addPass(createSetInferenceMode());
  pm.addPass(createConvertElementwiseToLinalg());
  pm.addPass(createLinalgElementwiseOpFusionPass());
  pm.addPass(createLowerStage());
}

void gpipe::buildPartitionPipeline(OpPassManager &pm,
                                   const PartitionPipelineOptions &o) {
  AppendLossOptions loss;
  loss.loss = o.loss;
  pm.addPass(createAppendLoss(loss));
  PartitionOptions partition;
  partition.deviceList = o.devices;
  partition.stages = o.stages;
  partition.microBatches = o.microBatches;
  partition.schedule = o.schedule;
  partition.recompute = o.recompute;
  partition.optimizerSlots = o.optimizerSlots;
  partition.profile = o.profile;
  partition.costTable = o.costTable;
  pm.addPass(createPartition(partition));
}

void gpipe::buildTrainStagePipeline(OpPassManager &pm,
                                    const TrainStagePipelineOptions &o) {
  pm.addPass(createAutodiff());
  SplitForwardBackwardOptions split;
  split.recompute = o.recompute;
  split.lastStage = o.lastStage;
  pm.addPass(createSplitForwardBackward(split));
  AppendOptimizerOptions optimizer;
  optimizer.optimizer = o.optimizer;
  optimizer.momentum = o.momentum;
  optimizer.nesterov = o.nesterov;
  pm.addPass(createAppendOptimizer(optimizer));
}

void gpipe::buildLowerTrainingStagePipeline(
    OpPassManager &pm, const LowerTrainingStagePipelineOptions &o) {
  pm.addPass(createConvertElementwiseToLinalg());
  pm.addPass(createLinalgElementwiseOpFusionPass());
  for (StringRef phase : {"forward", "backward", "optimizer"}) {
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
      buildInferencePipeline);
  PassPipelineRegistration<PartitionPipelineOptions>(
      "gpipe-partition-pipeline",
      "Append the loss and cut the model into pipeline stages",
      buildPartitionPipeline);
  PassPipelineRegistration<TrainStagePipelineOptions>(
      "gpipe-train-stage-pipeline",
      "One outlined stage: autodiff, forward/backward split, optimizer",
      buildTrainStagePipeline);
  PassPipelineRegistration<LowerTrainingStagePipelineOptions>(
      "gpipe-lower-training-stage-pipeline",
      "A trained stage's phases lowered to entry points on arenas",
      buildLowerTrainingStagePipeline);
}
