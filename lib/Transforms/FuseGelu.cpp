//===- FuseGelu.cpp - GELU written out with erf, as one nn.gelu -----------===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

#include "mlir/IR/Matchers.h"
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
  APFloat value(0.0);
  return matchPattern(v, m_ConstantFloat(&value)) &&
         std::abs(value.convertToDouble() - expected) <=
             1e-6 * std::abs(expected);
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
/// Hugging Face form x * 0.5 * (1 + erf(x / sqrt(2))) too), and its tanh
/// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's
/// "gelu_new": Pow, Mul, Add, Mul, Tanh, Add, Mul, Mul): one nn.gelu.
/// Its forward is one loop instead of three, and its backward keeps x
/// alone instead of x / sqrt(2) and 1 + erf(...) besides.
struct GeluFromErf : OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nn::MulOp op,
                                PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      return rewriter.notifyMatchFailure(op, "not a float tensor");
    // 1 + erf(x / sqrt(2)) or 1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)):
    // its x, and which of the two.
    StringRef approximate;
    auto term = [&](Value v) -> Value {
      auto add = v.getDefiningOp<nn::AddOp>();
      Value e = otherThan(add, [](Value c) { return isConstant(c, 1.0); });
      if (!e)
        return Value();
      if (auto erf = e.getDefiningOp<nn::ErfOp>()) {
        auto div = erf.getInput().getDefiningOp<nn::DivOp>();
        if (!div || !isConstant(div.getRhs(), std::sqrt(2.0)))
          return Value();
        approximate = "none";
        return div.getLhs();
      }
      auto tanh = e.getDefiningOp<nn::TanhOp>();
      auto scaled =
          tanh ? tanh.getInput().getDefiningOp<nn::MulOp>() : nn::MulOp();
      Value inner = otherThan(
          scaled, [](Value c) { return isConstant(c, std::sqrt(2.0 / M_PI)); });
      auto sum = inner ? inner.getDefiningOp<nn::AddOp>() : nn::AddOp();
      if (!sum)
        return Value();
      // x + 0.044715 * x^3, either way round.
      for (auto [x, cubic] : {std::pair(sum.getLhs(), sum.getRhs()),
                              std::pair(sum.getRhs(), sum.getLhs())}) {
        auto times = cubic.getDefiningOp<nn::MulOp>();
        Value cube =
            otherThan(times, [](Value c) { return isConstant(c, 0.044715); });
        auto pow = cube ? cube.getDefiningOp<nn::PowOp>() : nn::PowOp();
        if (pow && pow.getLhs() == x && isConstant(pow.getRhs(), 3.0)) {
          approximate = "tanh";
          return x;
        }
      }
      return Value();
    };
    auto isHalf = [](Value c) { return isConstant(c, 0.5); };
    Value x;
    // (x * (1 + erf)) * 0.5
    if (Value inner = otherThan(op, isHalf)) {
      auto product = inner.getDefiningOp<nn::MulOp>();
      if (product) {
        if (Value t = term(product.getRhs()); t && t == product.getLhs())
          x = t;
        else if (Value t = term(product.getLhs()); t && t == product.getRhs())
          x = t;
      }
    }
    // (x * 0.5) * (1 + erf)
    for (auto [half, factor] : {std::pair(op.getLhs(), op.getRhs()),
                                std::pair(op.getRhs(), op.getLhs())}) {
      if (x)
        break;
      auto scaled = half.getDefiningOp<nn::MulOp>();
      Value t = term(factor);
      if (t && otherThan(scaled, [&](Value c) { return c == t; }) &&
          isHalf(otherThan(scaled, [&](Value c) { return c == t; })))
        x = t;
    }
    if (!x || x.getType() != op.getType())
      return rewriter.notifyMatchFailure(op, "not x * (1 + erf or tanh) / 2");
    rewriter.replaceOpWithNewOp<nn::GeluOp>(
        op, op.getType(), x, rewriter.getStringAttr(approximate));
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
