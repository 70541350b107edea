//===- MarkBatchPlacement.cpp - Outputs' batch placement for inference ----===//
#include "Transforms/Passes.h"

#include "Analysis/BatchPlacement.h"

#include "mlir/IR/BuiltinOps.h"

namespace gpipe {
#define GEN_PASS_DEF_MARKBATCHPLACEMENT
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;

namespace {
struct MarkBatchPlacementPass
    : public gpipe::impl::MarkBatchPlacementBase<MarkBatchPlacementPass> {
  void runOnOperation() override {
    auto forward = getOperation().lookupSymbol<func::FuncOp>("forward");
    if (!forward || forward.getNumArguments() == 0)
      return;
    auto first = cast<RankedTensorType>(forward.getArgument(0).getType());
    if (first.getRank() == 0)
      return;
    Builder b(&getContext());
    for (auto [i, p] : llvm::enumerate(
             gpipe::resultBatchPlacements(forward, first.getDimSize(0))))
      if (p)
        forward.setResultAttr(i, "gpipe.batch",
                              b.getDenseI64ArrayAttr({p->axis, p->inner}));
  }
};
} // namespace
