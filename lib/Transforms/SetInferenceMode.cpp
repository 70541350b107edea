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
    getOperation()->walk([&](Operation *op) {
      if (isa<gpipe::nn::DropoutOp, gpipe::nn::BatchNormOp>(op))
        op->setAttr("training", b.getBoolAttr(false));
    });
  }
};
} // namespace
