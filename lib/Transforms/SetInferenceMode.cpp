//===- SetInferenceMode.cpp - Inference behaviour of dropout and BN -------===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

namespace gpipe {
#define GEN_PASS_DEF_SETINFERENCEMODE
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;

namespace {
struct SetInferenceModePass
    : public gpipe::impl::SetInferenceModeBase<SetInferenceModePass> {
  void runOnOperation() override {
    Builder b(&getContext());
    WalkResult result = getOperation()->walk([&](Operation *op) {
      if (op->hasAttr("gpipe.running_statistic")) {
        op->emitError("the model outputs BatchNormalization's updated running "
                      "statistics, which inference does not compute; this "
                      "needs training (--mode=train)");
        return WalkResult::interrupt();
      }
      if (isa<gpipe::nn::DropoutOp, gpipe::nn::BatchNormOp>(op))
        op->setAttr("training", b.getBoolAttr(false));
      // Attention's dropout on its weights is off too.
      if (isa<gpipe::nn::AttentionOp>(op))
        op->setAttr("dropout_ratio", b.getF32FloatAttr(0.0f));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
