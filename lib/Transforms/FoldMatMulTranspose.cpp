//===- FoldMatMulTranspose.cpp - A MatMul by W^T as a Gemm ----------------===//
#include "Transforms/Passes.h"

#include "Analysis/CostModel.h"
#include "NN/IR/NNOps.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpipe {
#define GEN_PASS_DEF_FOLDMATMULTRANSPOSE
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// matmul(x [..., K], transpose(w [N, K])) -> reshape(gemm(reshape(x)
/// [R, K], w, trans_b) [R, N]) [..., N].
struct MatMulByTransposedMatrix : OpRewritePattern<nn::MatMulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nn::MatMulOp op,
                                PatternRewriter &rewriter) const override {
    auto transpose = op.getRhs().getDefiningOp<nn::TransposeOp>();
    if (!transpose || transpose.getPerm() != ArrayRef<int64_t>{1, 0})
      return rewriter.notifyMatchFailure(op, "right operand not a W^T");
    Value w = transpose.getInput();
    auto x = dyn_cast<RankedTensorType>(op.getLhs().getType());
    auto wType = dyn_cast<RankedTensorType>(w.getType());
    auto out = dyn_cast<RankedTensorType>(op.getType());
    if (!x || !wType || !out || !x.hasStaticShape() ||
        !wType.hasStaticShape() || x.getRank() < 2 ||
        x.getElementType() != wType.getElementType() ||
        !isa<FloatType>(x.getElementType()))
      return rewriter.notifyMatchFailure(op, "not a float [..., K] x [K, N]");
    int64_t k = x.getShape().back(), n = wType.getDimSize(0);
    int64_t rows = x.getNumElements() / std::max<int64_t>(k, 1);
    SmallVector<int64_t> shape(x.getShape().drop_back());
    shape.push_back(n);
    if (wType.getDimSize(1) != k || out.getShape() != ArrayRef(shape) ||
        out.getElementType() != x.getElementType())
      return rewriter.notifyMatchFailure(op, "not [..., K] x [K, N]");
    Location loc = op.getLoc();
    // The reshapes are named apart: a cost table's entry for the MatMul's
    // node is the Gemm's alone.
    Location rowsLoc = NameLoc::get(
        rewriter.getStringAttr(gpipe::costTableKey(op) + ":rows"), loc);
    Value lhs = op.getLhs();
    if (x.getRank() != 2)
      lhs = rewriter.create<nn::ReshapeOp>(rowsLoc, lhs,
                                           SmallVector<int64_t>{rows, k});
    Value product = rewriter.create<nn::GemmOp>(
        loc, lhs, w, /*c=*/Value(), APFloat(1.0f), APFloat(1.0f),
        /*trans_a=*/false, /*trans_b=*/true, op.getComputeType());
    if (x.getRank() != 2)
      product = rewriter.create<nn::ReshapeOp>(rowsLoc, product, shape);
    rewriter.replaceOp(op, product);
    return success();
  }
};

/// add(reshape?(gemm(a, b) [R, N]), bias [N]) -> reshape?(gemm(a, b, bias,
/// beta = 1)): a Linear layer's bias added by the product (oneDNN's bias)
/// instead of a pass of its own over the output. The bias's gradient is
/// the same sum over the rows (GemmOp's VJP unbroadcasts C as AddOp's
/// does).
struct GemmPlusBias : OpRewritePattern<nn::AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nn::AddOp op,
                                PatternRewriter &rewriter) const override {
    for (int side = 0; side < 2; ++side) {
      Value product = op->getOperand(side), bias = op->getOperand(1 - side);
      auto reshape = product.getDefiningOp<nn::ReshapeOp>();
      Value rows = reshape ? reshape.getInput() : product;
      auto gemm = rows.getDefiningOp<nn::GemmOp>();
      if (!gemm || gemm.getC() || !gemm->hasOneUse() ||
          (reshape && !reshape->hasOneUse()) ||
          !gemm.getAlpha().isExactlyValue(1.0))
        continue;
      auto out = dyn_cast<RankedTensorType>(gemm.getType());
      auto biasType = dyn_cast<RankedTensorType>(bias.getType());
      auto sum = dyn_cast<RankedTensorType>(op.getType());
      if (!out || !biasType || !sum || !out.hasStaticShape() ||
          biasType.getRank() != 1 ||
          biasType.getDimSize(0) != out.getDimSize(1) ||
          biasType.getElementType() != out.getElementType() ||
          sum.getShape() !=
              cast<RankedTensorType>(product.getType()).getShape())
        continue; // not a row of N added to every row
      if (reshape &&
          (sum.getRank() < 1 || sum.getShape().back() != out.getDimSize(1)))
        continue; // the reshape must keep the rows' last axis
      Value fused = rewriter.create<nn::GemmOp>(
          gemm.getLoc(), gemm.getA(), gemm.getB(), bias, gemm.getAlpha(),
          APFloat(1.0f), gemm.getTransA(), gemm.getTransB(),
          gemm.getComputeType());
      Value result = fused;
      if (reshape)
        result = rewriter.create<nn::ReshapeOp>(
            reshape.getLoc(), fused, SmallVector<int64_t>(sum.getShape()));
      rewriter.replaceOp(op, result);
      return success();
    }
    return rewriter.notifyMatchFailure(op, "not a product plus a bias row");
  }
};

struct FoldMatMulTransposePass
    : public gpipe::impl::FoldMatMulTransposeBase<FoldMatMulTransposePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<MatMulByTransposedMatrix, GemmPlusBias>(&getContext());
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
