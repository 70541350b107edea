//===- FuseAttention.cpp - Scaled dot-product attention as one op ---------===//
//
// softmax(scale * q k^T (+ mask)) v, as exporters write it, becomes one
// nn.attention: a kernel that never holds the Tq x Tk scores beyond a tile
// (and, for a causal mask, skips the tiles above the diagonal).
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <limits>

namespace gpipe {
#define GEN_PASS_DEF_FUSEATTENTION
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// The value of a constant float scalar (a splat of any shape), or none.
std::optional<double> scalarConstant(Value v) {
  APFloat value(0.0);
  if (!matchPattern(v, m_ConstantFloat(&value)))
    return std::nullopt;
  return value.convertToDouble();
}

bool isMinusInfinity(Value v) {
  std::optional<double> c = scalarConstant(v);
  return c && std::isinf(*c) && *c < 0;
}

/// The operand of `op` that is not a scalar constant, and that constant
/// (through `scale`); null where neither or both are.
template <typename OpTy> Value scaled(OpTy op, double &scale) {
  std::optional<double> lhs = scalarConstant(op.getLhs()),
                        rhs = scalarConstant(op.getRhs());
  if (rhs && !lhs) {
    scale = *rhs;
    return op.getLhs();
  }
  if (lhs && !rhs && isa<nn::MulOp>(op.getOperation())) {
    scale = *lhs;
    return op.getRhs();
  }
  return Value();
}

/// `v` through a multiplication or division by a scalar constant (read by
/// nothing else): what is scaled, with the factor folded into `scale`.
Value throughScale(Value v, double &scale) {
  Operation *def = v.getDefiningOp();
  if (!def || !def->hasOneUse())
    return v;
  double c = 1;
  if (auto mul = dyn_cast<nn::MulOp>(def))
    if (Value x = scaled(mul, c); x && x.getType() == v.getType()) {
      scale *= c;
      return x;
    }
  if (auto div = dyn_cast<nn::DivOp>(def))
    if (Value x = scaled(div, c); x && c != 0 && x.getType() == v.getType()) {
      scale /= c;
      return x;
    }
  return v;
}

bool sameLeadingDims(RankedTensorType a, RankedTensorType b) {
  return a.getRank() == b.getRank() &&
         a.getShape().drop_back(2) == b.getShape().drop_back(2);
}

/// Whether `mask` (of the scores' element type, or i1) broadcasts to
/// `scores` without growing it.
bool broadcastsTo(RankedTensorType mask, RankedTensorType scores) {
  if (!(mask.getElementType() == scores.getElementType() ||
        mask.getElementType().isInteger(1)))
    return false;
  SmallVector<int64_t> shape;
  return OpTrait::util::getBroadcastedShape(scores.getShape(), mask.getShape(),
                                            shape) &&
         ArrayRef<int64_t>(shape) == scores.getShape();
}

/// A boolean constant `where` masks out where it is `maskedWhen`: whether
/// it masks exactly the keys after each query (a causal mask, broadcast
/// over every leading dimension).
bool isCausal(DenseElementsAttr condition, bool maskedWhen, int64_t tq,
              int64_t tk) {
  auto type = cast<RankedTensorType>(condition.getType());
  if (type.getRank() < 2 || tq != tk ||
      type.getShape().take_back(2) != ArrayRef<int64_t>{tq, tk} ||
      type.getNumElements() != tq * tk)
    return false;
  int64_t i = 0;
  for (bool c : condition.getValues<bool>()) {
    int64_t row = i / tk, col = i % tk;
    if ((c == maskedWhen) != (col > row))
      return false;
    ++i;
  }
  return true;
}

/// softmax(scale * q k^T + mask) v in its exported forms: the product of
/// the queries [..., Tq, D] and the transposed keys [..., D, Tk], scaled
/// by a constant (multiplied or divided; on the product or on the
/// queries), a masked fill with -inf (`masked_fill`/Where, by a boolean
/// tensor) or an added constant mask, Softmax over the keys, dropout on
/// the weights (nn.TransformerEncoder's attention when training: the op's
/// own, drawing the mask the dropout would), and the product with the
/// values [..., Tk, Dv]. Every value between is read by the next op alone
/// (one with another use stays, and so does the unfused path). Not fused:
/// masks computed from trained values, broadcasting products, other
/// element types than float32.
struct AttentionFromParts : OpRewritePattern<nn::MatMulOp> {
  AttentionFromParts(MLIRContext *context, int64_t minKeys)
      : OpRewritePattern(context), minKeys(minKeys) {}
  int64_t minKeys;

  LogicalResult matchAndRewrite(nn::MatMulOp op,
                                PatternRewriter &rewriter) const override {
    Value weights = op.getLhs();
    // Dropout on the weights: the op's own (the same stream, when the
    // dropout has one already).
    double dropoutRatio = 0;
    int64_t stream = -1;
    if (auto dropout = weights.getDefiningOp<nn::DropoutOp>()) {
      if (!dropout->hasOneUse())
        return failure();
      if (dropout.isRandom()) {
        dropoutRatio = dropout.getRatio().convertToDouble();
        if (std::optional<int64_t> s = dropout.getStream())
          stream = *s;
      }
      weights = dropout.getInput();
    }
    auto softmax = weights.getDefiningOp<nn::SoftmaxOp>();
    if (!softmax || !softmax->hasOneUse())
      return rewriter.notifyMatchFailure(op, "not a product of softmax");
    auto scoresType = cast<RankedTensorType>(softmax.getType());
    int64_t rank = scoresType.getRank();
    if (rank < 2 || !scoresType.getElementType().isF32() ||
        (softmax.getAxis() != -1 && softmax.getAxis() != rank - 1))
      return rewriter.notifyMatchFailure(op, "not a softmax over the keys");
    Value value = op.getRhs();
    auto valueType = cast<RankedTensorType>(value.getType());
    if (!sameLeadingDims(scoresType, valueType))
      return rewriter.notifyMatchFailure(op, "broadcasting product");
    int64_t tq = scoresType.getShape()[rank - 2],
            tk = scoresType.getShape()[rank - 1];
    if (tk < minKeys)
      return rewriter.notifyMatchFailure(op, "a short sequence");

    // The mask: a masked fill with -inf or an added constant.
    Value scores = softmax.getInput();
    Value mask, condition;
    bool causal = false, maskedWhen = true;
    SmallVector<Location> locs{softmax.getLoc()};
    if (auto where = scores.getDefiningOp<nn::WhereOp>()) {
      if (isMinusInfinity(where.getX()) && where.getY().getType() == scoresType)
        scores = where.getY();
      else if (isMinusInfinity(where.getY()) &&
               where.getX().getType() == scoresType)
        maskedWhen = false, scores = where.getX();
      else
        return rewriter.notifyMatchFailure(op, "a fill other than -inf");
      if (!where->hasOneUse())
        return failure();
      locs.push_back(where.getLoc());
      condition = where.getCondition();
      DenseElementsAttr bits;
      if (matchPattern(condition, m_Constant(&bits)) &&
          isCausal(bits, maskedWhen, tq, tk))
        causal = true, condition = Value();
    } else if (auto add = scores.getDefiningOp<nn::AddOp>()) {
      DenseElementsAttr constant;
      Value other;
      if (matchPattern(add.getRhs(), m_Constant(&constant)))
        mask = add.getRhs(), other = add.getLhs();
      else if (matchPattern(add.getLhs(), m_Constant(&constant)))
        mask = add.getLhs(), other = add.getRhs();
      if (!mask || other.getType() != scoresType || !add->hasOneUse() ||
          !broadcastsTo(cast<RankedTensorType>(mask.getType()), scoresType))
        return rewriter.notifyMatchFailure(op, "not a constant mask");
      scores = other;
      locs.push_back(add.getLoc());
    }
    if (condition &&
        !broadcastsTo(cast<RankedTensorType>(condition.getType()), scoresType))
      return rewriter.notifyMatchFailure(op, "a mask of another shape");

    // The scale, on the product or on the queries.
    double scale = 1;
    scores = throughScale(scores, scale);
    auto product = scores.getDefiningOp<nn::MatMulOp>();
    if (!product || !product->hasOneUse())
      return rewriter.notifyMatchFailure(op, "no product of queries and keys");
    Value query = product.getLhs(), keysT = product.getRhs();
    auto queryType = cast<RankedTensorType>(query.getType());
    auto keysTType = cast<RankedTensorType>(keysT.getType());
    if (!sameLeadingDims(scoresType, queryType) ||
        !sameLeadingDims(scoresType, keysTType))
      return rewriter.notifyMatchFailure(op, "broadcasting product");
    query = throughScale(query, scale);
    locs.push_back(product.getLoc());
    locs.push_back(op.getLoc());

    // The keys [..., Tk, D]: the transposed keys' last two axes swapped,
    // one transpose with the one that made them (heads' reshapes).
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
    std::swap(perm[rank - 1], perm[rank - 2]);
    Value keysSource = keysT;
    if (auto t = keysT.getDefiningOp<nn::TransposeOp>()) {
      ArrayRef<int64_t> inner = t.getPerm();
      SmallVector<int64_t> composed;
      for (int64_t p : perm)
        composed.push_back(inner[p]);
      perm = composed;
      keysSource = t.getInput();
    }
    Value key = keysSource;
    if (!llvm::equal(perm, llvm::seq<int64_t>(0, rank)))
      key = rewriter.create<nn::TransposeOp>(
          keysT.getLoc(), keysSource, rewriter.getDenseI64ArrayAttr(perm));

    if (condition) {
      // 0 where a key is seen, -inf where it is masked out.
      Location at = locs[1];
      auto scalar = RankedTensorType::get({}, rewriter.getF32Type());
      Value minusInf = rewriter.create<nn::ConstantOp>(
          at, DenseElementsAttr::get(scalar,
                                     -std::numeric_limits<float>::infinity()));
      Value zero = rewriter.create<nn::ConstantOp>(
          at, DenseElementsAttr::get(scalar, 0.0f));
      mask = rewriter.create<nn::WhereOp>(at, condition,
                                          maskedWhen ? minusInf : zero,
                                          maskedWhen ? zero : minusInf);
    }
    SmallVector<Value> operands{query, key, value};
    if (mask)
      operands.push_back(mask);
    auto attention = rewriter.create<nn::AttentionOp>(
        rewriter.getFusedLoc(locs), operands,
        ArrayRef<NamedAttribute>{
            rewriter.getNamedAttr("scale", rewriter.getF32FloatAttr(scale)),
            rewriter.getNamedAttr("causal", rewriter.getBoolAttr(causal)),
            rewriter.getNamedAttr("dropout_ratio",
                                  rewriter.getF32FloatAttr(dropoutRatio)),
            rewriter.getNamedAttr("stream",
                                  rewriter.getI64IntegerAttr(stream))});
    rewriter.replaceOp(op, attention.getOutput());
    return success();
  }
};

struct FuseAttention : gpipe::impl::FuseAttentionBase<FuseAttention> {
  using FuseAttentionBase::FuseAttentionBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<AttentionFromParts>(&getContext(), minKeys);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
