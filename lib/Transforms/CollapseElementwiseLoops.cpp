//===- CollapseElementwiseLoops.cpp - Element-wise loops as one loop ------===//
#include "Transforms/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpipe {
#define GEN_PASS_DEF_COLLAPSEELEMENTWISELOOPS
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;

namespace {

/// The position of dimension `d` among `map`'s results, or -1.
int64_t resultOf(AffineMap map, unsigned d) {
  for (auto [i, e] : llvm::enumerate(map.getResults()))
    if (auto dim = dyn_cast<AffineDimExpr>(e); dim && dim.getPosition() == d)
      return static_cast<int64_t>(i);
  return -1;
}

/// Runs of consecutive loop dimensions that every operand indexes in
/// order (d, d+1 at adjacent results) or not at all.
SmallVector<ReassociationIndices> mergeableDims(linalg::LinalgOp op) {
  SmallVector<ReassociationIndices> groups;
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic || generic.getNumLoops() < 2 ||
      generic.getNumParallelLoops() != generic.getNumLoops() ||
      !generic.getBody()->getOps<linalg::IndexOp>().empty())
    return groups;
  SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  // Broadcasts of size-1 axes index by constants: left as they are.
  if (!llvm::all_of(maps,
                    [](AffineMap map) { return map.isProjectedPermutation(); }))
    return groups;
  ReassociationIndices run{0};
  for (unsigned d = 1; d < generic.getNumLoops(); ++d) {
    bool joins = llvm::all_of(maps, [&](AffineMap map) {
      int64_t previous = resultOf(map, d - 1), current = resultOf(map, d);
      return (previous < 0 && current < 0) ||
             (previous >= 0 && current == previous + 1);
    });
    if (!joins) {
      if (run.size() > 1)
        groups.push_back(run);
      run.clear();
    }
    run.push_back(d);
  }
  if (run.size() > 1)
    groups.push_back(run);
  return groups;
}

struct CollapseElementwiseLoopsPass
    : public gpipe::impl::CollapseElementwiseLoopsBase<
          CollapseElementwiseLoopsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    linalg::populateCollapseDimensions(patterns, mergeableDims);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
