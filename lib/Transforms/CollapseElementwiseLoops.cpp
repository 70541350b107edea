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
  // Constant indices that DropBroadcastUnitAxes did not take away: left as
  // they are.
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

/// An input of an element-wise loop that broadcasts size-1 axes by
/// constant indices (a global pool's gradient, [N, C, 1, 1] -> (d0, d1, 0,
/// 0); a mask of [1, 1, T, T] over [B, H, T, T]) read through a view without
/// those axes, its map without the constants: a projected permutation, so
/// that the loops it does not index merge with their neighbours
/// (mergeableDims). The global pool's gradient of a small CNN, [32, 16, 14,
/// 14], had kept an innermost loop of 14 elements.
struct DropBroadcastUnitAxes : public OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.hasPureBufferSemantics() ||
        op.getNumParallelLoops() != op.getNumLoops() ||
        !op.getBody()->getOps<linalg::IndexOp>().empty())
      return failure();
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    bool changed = false;
    for (OpOperand *input : op.getDpsInputOperands()) {
      auto type = dyn_cast<MemRefType>(input->get().getType());
      AffineMap map = maps[input->getOperandNumber()];
      if (!type || map.isProjectedPermutation() ||
          map.getNumResults() != type.getRank())
        continue;
      // The axes kept (indexed by a loop) and dropped (a constant 0 on a
      // size-1 axis); any other index leaves the input as it is.
      SmallVector<AffineExpr> kept;
      SmallVector<bool> dropped;
      bool other = false;
      for (auto [axis, e] : llvm::enumerate(map.getResults())) {
        auto constant = dyn_cast<AffineConstantExpr>(e);
        bool unit =
            constant && constant.getValue() == 0 && type.getDimSize(axis) == 1;
        other |= !unit && !isa<AffineDimExpr>(e);
        dropped.push_back(unit);
        if (!unit)
          kept.push_back(e);
      }
      if (other)
        continue;
      // Each kept axis with the dropped ones before it (and the last with
      // those after it); none when every axis is dropped (a scalar).
      SmallVector<ReassociationIndices> groups;
      ReassociationIndices pending;
      for (int64_t axis = 0; axis < type.getRank(); ++axis) {
        pending.push_back(axis);
        if (!dropped[axis]) {
          groups.push_back(pending);
          pending.clear();
        }
      }
      if (!groups.empty())
        groups.back().append(pending.begin(), pending.end());
      if (!memref::CollapseShapeOp::isGuaranteedCollapsible(type, groups))
        continue;
      Value view = rewriter.create<memref::CollapseShapeOp>(
          op.getLoc(), input->get(), groups);
      rewriter.modifyOpInPlace(op, [&] { input->set(view); });
      maps[input->getOperandNumber()] = AffineMap::get(
          map.getNumDims(), map.getNumSymbols(), kept, op.getContext());
      changed = true;
    }
    if (!changed)
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      op.setIndexingMapsAttr(rewriter.getAffineMapArrayAttr(maps));
    });
    return success();
  }
};

struct CollapseElementwiseLoopsPass
    : public gpipe::impl::CollapseElementwiseLoopsBase<
          CollapseElementwiseLoopsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<DropBroadcastUnitAxes>(&getContext());
    linalg::populateCollapseDimensions(patterns, mergeableDims);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
