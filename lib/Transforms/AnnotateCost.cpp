//===- AnnotateCost.cpp - FLOPs and bytes of nn ops as attributes ---------===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

namespace gpipe {
#define GEN_PASS_DEF_ANNOTATECOST
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;

namespace {
struct AnnotateCostPass
    : public gpipe::impl::AnnotateCostBase<AnnotateCostPass> {
  void runOnOperation() override {
    Builder b(&getContext());
    getOperation()->walk([&](gpipe::nn::CostOpInterface op) {
      op->setAttr("gpipe.flops", b.getI64IntegerAttr(op.getFlops()));
      op->setAttr("gpipe.bytes", b.getI64IntegerAttr(op.getBytesMoved()));
      op->setAttr("gpipe.backward_bytes",
                  b.getI64IntegerAttr(op.getBackwardBytesMoved()));
      op->setAttr("gpipe.kernel_family", b.getStringAttr(op.getKernelFamily()));
      op->setAttr("gpipe.kernel_family_backward",
                  b.getStringAttr(op.getBackwardKernelFamily()));
    });
  }
};
} // namespace
