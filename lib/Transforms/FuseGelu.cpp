//===- FuseGelu.cpp - GELU written out with erf, as one nn.gelu -----------===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace gpipe {
#define GEN_PASS_DEF_FUSEGELU
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// Whether `v` is a constant whose every element is `expected` (within
/// float32 rounding).
bool isConstant(Value v, double expected) {
  auto constant = v.getDefiningOp<nn::ConstantOp>();
  if (!constant)
    return false;
  auto dense = dyn_cast<DenseFPElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat())
    return false;
  double value = dense.getSplatValue<APFloat>().convertToDouble();
  return std::abs(value - expected) <= 1e-6 * std::abs(expected);
}

/// The operand of a commutative binary op other than the one matching
/// `match`, or null.
template <typename OpTy>
Value otherThan(OpTy op, llvm::function_ref<bool(Value)> match) {
  if (!op)
    return Value();
  if (match(op.getLhs()))
    return op.getRhs();
  if (match(op.getRhs()))
    return op.getLhs();
  return Value();
}

/// x * (1 + erf(x / sqrt(2))) * 0.5, as exporters write GELU without a
/// Gelu op (torch.onnx at opsets below 20: Div, Erf, Add, Mul, Mul; the
/// Hugging Face form x * 0.5 * (1 + erf(x / sqrt(2))) too): one nn.gelu.
/// Its forward is one loop instead of three, and its backward keeps x
/// alone instead of x / sqrt(2) and 1 + erf(...) besides.
struct GeluFromErf : OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nn::MulOp op,
                                PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      return rewriter.notifyMatchFailure(op, "not a float tensor");
    // 1 + erf(x / sqrt(2)), its x.
    auto erfTerm = [](Value v) -> Value {
      auto add = v.getDefiningOp<nn::AddOp>();
      Value e = otherThan(add, [](Value c) { return isConstant(c, 1.0); });
      auto erf = e ? e.getDefiningOp<nn::ErfOp>() : nn::ErfOp();
      auto div = erf ? erf.getInput().getDefiningOp<nn::DivOp>() : nn::DivOp();
      if (!div || !isConstant(div.getRhs(), std::sqrt(2.0)))
        return Value();
      return div.getLhs();
    };
    auto isHalf = [](Value c) { return isConstant(c, 0.5); };
    Value x;
    // (x * (1 + erf)) * 0.5
    if (Value inner = otherThan(op, isHalf)) {
      auto product = inner.getDefiningOp<nn::MulOp>();
      if (product) {
        if (Value t = erfTerm(product.getRhs()); t && t == product.getLhs())
          x = t;
        else if (Value t = erfTerm(product.getLhs());
                 t && t == product.getRhs())
          x = t;
      }
    }
    // (x * 0.5) * (1 + erf)
    for (auto [half, term] : {std::pair(op.getLhs(), op.getRhs()),
                              std::pair(op.getRhs(), op.getLhs())}) {
      if (x)
        break;
      auto scaled = half.getDefiningOp<nn::MulOp>();
      Value t = erfTerm(term);
      if (t && otherThan(scaled, [&](Value c) { return c == t; }) &&
          isHalf(otherThan(scaled, [&](Value c) { return c == t; })))
        x = t;
    }
    if (!x || x.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "not x * (1 + erf(x/sqrt2)) / 2");
    rewriter.replaceOpWithNewOp<nn::GeluOp>(op, op.getType(), x,
                                            rewriter.getStringAttr("none"));
    return success();
  }
};

struct FuseGeluPass : public gpipe::impl::FuseGeluBase<FuseGeluPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GeluFromErf>(&getContext());
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
