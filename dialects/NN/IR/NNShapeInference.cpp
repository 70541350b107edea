//===- NNShapeInference.cpp - Result types of nn forward ops --------------===//
//
// inferReturnTypes of every forward op. The verifier compares the declared
// result types against these, so this file is also where the shape and
// attribute rules of each op are checked. All diagnostics go through
// emitOptionalError so that inference can be queried without a location.
//
//===----------------------------------------------------------------------===//
#include "NN/IR/NNOps.h"

#include "mlir/Dialect/Traits.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace gpipe::nn;

namespace {

/// Largest magnitude accepted for sizes, strides, pads and steps: keeps all
/// shape arithmetic far from int64 overflow, whatever the input.
constexpr int64_t kMaxExtent = int64_t(1) << 32;

LogicalResult checkBounded(std::optional<Location> loc, StringRef opName,
                           StringRef attrName, ArrayRef<int64_t> values) {
  for (int64_t v : values)
    if (v > kMaxExtent || v < -kMaxExtent)
      return emitOptionalError(loc, "'nn.", opName, "' attribute '", attrName,
                               "' value ", v, " is out of range");
  return success();
}

RankedTensorType rankedType(Value v) {
  return llvm::dyn_cast<RankedTensorType>(v.getType());
}

LogicalResult checkStaticRank(std::optional<Location> loc, StringRef opName,
                              RankedTensorType type, StringRef what,
                              int64_t minRank) {
  if (!type.hasStaticShape())
    return emitOptionalError(loc, "'nn.", opName, "' ", what,
                             " must have a static shape, got ", type);
  if (type.getRank() < minRank)
    return emitOptionalError(loc, "'nn.", opName, "' ", what,
                             " must have rank >= ", minRank, ", got ", type);
  return success();
}

/// Normalizes `axis` into [0, rank); fails with a diagnostic otherwise.
FailureOr<int64_t> normalizeAxis(std::optional<Location> loc, StringRef opName,
                                 int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return emitOptionalError(loc, "'nn.", opName, "' axis ", axis,
                             " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

/// Output size of a sliding window (convolution or pooling).
FailureOr<int64_t> windowOutputSize(std::optional<Location> loc,
                                    StringRef opName, int64_t in,
                                    int64_t kernel, int64_t stride,
                                    int64_t padBegin, int64_t padEnd,
                                    int64_t dilation, bool ceilMode) {
  if (kernel <= 0 || stride <= 0 || dilation <= 0)
    return emitOptionalError(loc, "'nn.", opName,
                             "' kernel, strides and dilations must be "
                             "positive, got kernel ",
                             kernel, ", stride ", stride, ", dilation ",
                             dilation);
  if (padBegin < 0 || padEnd < 0)
    return emitOptionalError(loc, "'nn.", opName,
                             "' pads must be non-negative");
  int64_t effectiveKernel = (kernel - 1) * dilation + 1;
  int64_t span = in + padBegin + padEnd - effectiveKernel;
  if (span < 0)
    return emitOptionalError(loc, "'nn.", opName, "' window of extent ",
                             effectiveKernel, " does not fit the padded size ",
                             in + padBegin + padEnd);
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  // The last window must start inside the input or its begin padding.
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

LogicalResult checkArraySize(std::optional<Location> loc, StringRef opName,
                             StringRef attrName, ArrayRef<int64_t> values,
                             size_t expected) {
  if (values.size() != expected)
    return emitOptionalError(loc, "'nn.", opName, "' attribute '", attrName,
                             "' must have ", expected, " entries, got ",
                             values.size());
  return success();
}

/// Shared by conv and the two poolings: N, C, then windowed spatial axes.
FailureOr<SmallVector<int64_t>>
inferWindowedShape(std::optional<Location> loc, StringRef opName,
                   RankedTensorType input, ArrayRef<int64_t> kernel,
                   ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                   ArrayRef<int64_t> dilations, bool ceilMode) {
  if (failed(checkStaticRank(loc, opName, input, "input", 3)))
    return failure();
  size_t spatial = input.getRank() - 2;
  if (failed(checkArraySize(loc, opName, "kernel_shape", kernel, spatial)) ||
      failed(checkArraySize(loc, opName, "strides", strides, spatial)) ||
      failed(checkArraySize(loc, opName, "pads", pads, 2 * spatial)) ||
      failed(checkArraySize(loc, opName, "dilations", dilations, spatial)) ||
      failed(checkBounded(loc, opName, "kernel_shape", kernel)) ||
      failed(checkBounded(loc, opName, "strides", strides)) ||
      failed(checkBounded(loc, opName, "pads", pads)) ||
      failed(checkBounded(loc, opName, "dilations", dilations)))
    return failure();
  SmallVector<int64_t> shape(input.getShape().take_front(2));
  for (size_t i = 0; i < spatial; ++i) {
    FailureOr<int64_t> size = windowOutputSize(
        loc, opName, input.getDimSize(i + 2), kernel[i], strides[i], pads[i],
        pads[i + spatial], dilations[i], ceilMode);
    if (failed(size))
      return failure();
    shape.push_back(*size);
  }
  return shape;
}

LogicalResult inferBroadcast(std::optional<Location> loc, StringRef opName,
                             RankedTensorType lhs, RankedTensorType rhs,
                             Type elementType, SmallVectorImpl<Type> &results) {
  SmallVector<int64_t> shape;
  if (!OpTrait::util::getBroadcastedShape(lhs.getShape(), rhs.getShape(),
                                          shape))
    return emitOptionalError(loc, "'nn.", opName, "' operands ", lhs, " and ",
                             rhs, " are not broadcast-compatible");
  results.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

LogicalResult inferSameElementBroadcast(std::optional<Location> loc,
                                        StringRef opName, Value lhsValue,
                                        Value rhsValue,
                                        SmallVectorImpl<Type> &results) {
  RankedTensorType lhs = rankedType(lhsValue), rhs = rankedType(rhsValue);
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(
        loc, "'nn.", opName, "' operands must have the same element type, got ",
        lhs.getElementType(), " and ", rhs.getElementType());
  return inferBroadcast(loc, opName, lhs, rhs, lhs.getElementType(), results);
}

} // namespace

#define GPIPE_BINARY_INFER(OP, NAME)                                           \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &results) {                                        \
    return inferSameElementBroadcast(loc, NAME, adaptor.getLhs(),              \
                                     adaptor.getRhs(), results);               \
  }
GPIPE_BINARY_INFER(AddOp, "add")
GPIPE_BINARY_INFER(SubOp, "sub")
GPIPE_BINARY_INFER(MulOp, "mul")
GPIPE_BINARY_INFER(DivOp, "div")
GPIPE_BINARY_INFER(ModOp, "mod")
#undef GPIPE_BINARY_INFER

namespace {
/// Comparisons: operands of one element type, an i1 result.
LogicalResult inferCompare(MLIRContext *ctx, std::optional<Location> loc,
                           StringRef opName, Value lhsValue, Value rhsValue,
                           SmallVectorImpl<Type> &results) {
  RankedTensorType lhs = rankedType(lhsValue), rhs = rankedType(rhsValue);
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(
        loc, "'nn.", opName, "' operands must have the same element type, got ",
        lhs.getElementType(), " and ", rhs.getElementType());
  return inferBroadcast(loc, opName, lhs, rhs, IntegerType::get(ctx, 1),
                        results);
}

/// Logic: i1 operands, an i1 result.
LogicalResult inferLogical(std::optional<Location> loc, StringRef opName,
                           Value lhsValue, Value rhsValue,
                           SmallVectorImpl<Type> &results) {
  RankedTensorType lhs = rankedType(lhsValue), rhs = rankedType(rhsValue);
  for (RankedTensorType t : {lhs, rhs})
    if (!t.getElementType().isInteger(1))
      return emitOptionalError(loc, "'nn.", opName,
                               "' operands must be i1 tensors, got ", t);
  return inferBroadcast(loc, opName, lhs, rhs, lhs.getElementType(), results);
}
} // namespace

#define GPIPE_COMPARE_INFER(OP, NAME)                                          \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *ctx, std::optional<Location> loc, Adaptor adaptor,          \
      SmallVectorImpl<Type> &results) {                                        \
    return inferCompare(ctx, loc, NAME, adaptor.getLhs(), adaptor.getRhs(),    \
                        results);                                              \
  }
GPIPE_COMPARE_INFER(EqualOp, "equal")
GPIPE_COMPARE_INFER(LessOp, "less")
GPIPE_COMPARE_INFER(LessEqualOp, "less_equal")
GPIPE_COMPARE_INFER(GreaterOp, "greater")
GPIPE_COMPARE_INFER(GreaterEqualOp, "greater_equal")
#undef GPIPE_COMPARE_INFER

#define GPIPE_LOGICAL_INFER(OP, NAME)                                          \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &results) {                                        \
    return inferLogical(loc, NAME, adaptor.getLhs(), adaptor.getRhs(),         \
                        results);                                              \
  }
GPIPE_LOGICAL_INFER(AndOp, "and")
GPIPE_LOGICAL_INFER(OrOp, "or")
GPIPE_LOGICAL_INFER(XorOp, "xor")
#undef GPIPE_LOGICAL_INFER

LogicalResult WhereOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  RankedTensorType cond = rankedType(adaptor.getCondition()),
                   x = rankedType(adaptor.getX()),
                   y = rankedType(adaptor.getY());
  if (!cond.getElementType().isInteger(1))
    return emitOptionalError(loc,
                             "'nn.where' condition must be an i1 tensor, "
                             "got ",
                             cond);
  if (x.getElementType() != y.getElementType())
    return emitOptionalError(
        loc, "'nn.where' x and y must have the same element type, got ",
        x.getElementType(), " and ", y.getElementType());
  SmallVector<int64_t> xy, shape;
  if (!OpTrait::util::getBroadcastedShape(x.getShape(), y.getShape(), xy) ||
      !OpTrait::util::getBroadcastedShape(cond.getShape(), xy, shape))
    return emitOptionalError(loc, "'nn.where' operands ", cond, ", ", x,
                             " and ", y, " are not broadcast-compatible");
  results.push_back(RankedTensorType::get(shape, x.getElementType()));
  return success();
}

LogicalResult PowOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &results) {
  RankedTensorType lhs = rankedType(adaptor.getLhs());
  return inferBroadcast(loc, "pow", lhs, rankedType(adaptor.getRhs()),
                        lhs.getElementType(), results);
}

LogicalResult GemmOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &results) {
  RankedTensorType a = rankedType(adaptor.getA()),
                   b = rankedType(adaptor.getB());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOptionalError(loc, "'nn.gemm' operands must be 2-D, got ", a,
                             " and ", b);
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "'nn.gemm' operands must have the same "
                                  "element type");
  int64_t m = a.getDimSize(adaptor.getTransA() ? 1 : 0);
  int64_t ka = a.getDimSize(adaptor.getTransA() ? 0 : 1);
  int64_t kb = b.getDimSize(adaptor.getTransB() ? 1 : 0);
  int64_t n = b.getDimSize(adaptor.getTransB() ? 0 : 1);
  if (ka != kb)
    return emitOptionalError(loc, "'nn.gemm' inner dimensions differ: ", ka,
                             " vs ", kb);
  if (Value c = adaptor.getC()) {
    SmallVector<int64_t> shape;
    RankedTensorType cType = rankedType(c);
    if (!OpTrait::util::getBroadcastedShape({m, n}, cType.getShape(), shape) ||
        shape != SmallVector<int64_t>{m, n})
      return emitOptionalError(loc, "'nn.gemm' operand c of type ", cType,
                               " does not broadcast to ", m, "x", n);
  }
  results.push_back(RankedTensorType::get({m, n}, a.getElementType()));
  return success();
}

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  RankedTensorType lhs = rankedType(adaptor.getLhs());
  RankedTensorType rhs = rankedType(adaptor.getRhs());
  if (lhs.getRank() < 1 || rhs.getRank() < 1)
    return emitOptionalError(loc, "'nn.matmul' operands must have rank >= 1");
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "'nn.matmul' operands must have the same "
                                  "element type");
  // NumPy: 1-D operands are promoted to matrices and the axis is dropped.
  SmallVector<int64_t> l(lhs.getShape()), r(rhs.getShape());
  bool lhsVector = l.size() == 1, rhsVector = r.size() == 1;
  if (lhsVector)
    l.insert(l.begin(), 1);
  if (rhsVector)
    r.push_back(1);
  int64_t k = l.back();
  if (k != r[r.size() - 2])
    return emitOptionalError(
        loc, "'nn.matmul' contracting dimensions differ: ", lhs, " and ", rhs);
  SmallVector<int64_t> batch;
  if (!OpTrait::util::getBroadcastedShape(ArrayRef(l).drop_back(2),
                                          ArrayRef(r).drop_back(2), batch))
    return emitOptionalError(loc, "'nn.matmul' batch dimensions of ", lhs,
                             " and ", rhs, " do not broadcast");
  if (!lhsVector)
    batch.push_back(l[l.size() - 2]);
  if (!rhsVector)
    batch.push_back(r.back());
  results.push_back(RankedTensorType::get(batch, lhs.getElementType()));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  RankedTensorType weight = rankedType(adaptor.getWeight());
  if (weight.getRank() != input.getRank())
    return emitOptionalError(loc, "'nn.conv' weight rank ", weight.getRank(),
                             " differs from input rank ", input.getRank());
  int64_t group = adaptor.getGroup();
  if (group <= 0)
    return emitOptionalError(loc, "'nn.conv' group must be positive");
  auto shape = inferWindowedShape(
      loc, "conv", input, weight.getShape().drop_front(2), adaptor.getStrides(),
      adaptor.getPads(), adaptor.getDilations(), /*ceilMode=*/false);
  if (failed(shape))
    return failure();
  int64_t channels = input.getDimSize(1), filters = weight.getDimSize(0);
  if (group > channels || channels % group != 0 || filters % group != 0 ||
      weight.getDimSize(1) != channels / group)
    return emitOptionalError(loc, "'nn.conv' input has ", channels,
                             " channels but weight ", weight, " with group ",
                             group, " expects ",
                             group <= channels ? weight.getDimSize(1) * group
                                               : weight.getDimSize(1));
  if (Value bias = adaptor.getBias()) {
    RankedTensorType biasType = rankedType(bias);
    if (biasType.getRank() != 1 || biasType.getDimSize(0) != filters)
      return emitOptionalError(loc, "'nn.conv' bias must be 1-D of size ",
                               filters, ", got ", biasType);
  }
  (*shape)[1] = filters;
  results.push_back(RankedTensorType::get(*shape, input.getElementType()));
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  if (input.getRank() < 2)
    return emitOptionalError(loc, "'nn.batch_norm' input must have rank >= 2");
  int64_t channels = input.getDimSize(1);
  for (Value v : {adaptor.getScale(), adaptor.getBias(), adaptor.getMean(),
                  adaptor.getVar()}) {
    RankedTensorType t = rankedType(v);
    if (t.getRank() != 1 || t.getDimSize(0) != channels)
      return emitOptionalError(loc,
                               "'nn.batch_norm' scale, bias, mean and "
                               "var must be 1-D of size ",
                               channels, ", got ", t);
  }
  results.push_back(input);
  // saved_mean and saved_var.
  results.append(2, RankedTensorType::get({channels}, input.getElementType()));
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  RankedTensorType query = rankedType(adaptor.getQuery());
  RankedTensorType key = rankedType(adaptor.getKey());
  RankedTensorType value = rankedType(adaptor.getValue());
  int64_t rank = query.getRank();
  if (rank < 2 || key.getRank() != rank || value.getRank() != rank)
    return emitOptionalError(loc,
                             "'nn.attention' query, key and value must "
                             "have one rank of at least 2, got ",
                             query, ", ", key, " and ", value);
  ArrayRef<int64_t> q = query.getShape(), k = key.getShape(),
                    v = value.getShape();
  if (q.drop_back(2) != k.drop_back(2) || q.drop_back(2) != v.drop_back(2))
    return emitOptionalError(loc,
                             "'nn.attention' query, key and value must "
                             "have the same leading dimensions, got ",
                             query, ", ", key, " and ", value);
  if (q.back() != k.back() || k[rank - 2] != v[rank - 2])
    return emitOptionalError(
        loc,
        "'nn.attention' needs query [..., Tq, D], key [..., Tk, D] and "
        "value [..., Tk, Dv], got ",
        query, ", ", key, " and ", value);
  if (query.getElementType() != key.getElementType() ||
      query.getElementType() != value.getElementType())
    return emitOptionalError(loc, "'nn.attention' operands of different "
                                  "element types");
  double ratio = adaptor.getDropoutRatio().convertToDouble();
  if (!(ratio >= 0.0 && ratio < 1.0))
    return emitOptionalError(loc,
                             "'nn.attention' dropout_ratio must be in "
                             "[0, 1), got ",
                             ratio);
  if (adaptor.getCausal() && q[rank - 2] != k[rank - 2])
    return emitOptionalError(loc,
                             "'nn.attention' causal needs as many "
                             "queries as keys, got ",
                             q[rank - 2], " and ", k[rank - 2]);
  SmallVector<int64_t> scores(q.drop_back());
  scores.push_back(k[rank - 2]);
  if (Value mask = adaptor.getMask()) {
    SmallVector<int64_t> shape;
    RankedTensorType maskType = rankedType(mask);
    if (maskType.getElementType() != query.getElementType() ||
        !OpTrait::util::getBroadcastedShape(scores, maskType.getShape(),
                                            shape) ||
        ArrayRef<int64_t>(shape) != ArrayRef<int64_t>(scores))
      return emitOptionalError(loc, "'nn.attention' mask ", maskType,
                               " does not broadcast to the scores' shape");
  }
  SmallVector<int64_t> output(q.drop_back());
  output.push_back(v.back());
  results.push_back(RankedTensorType::get(output, query.getElementType()));
  results.push_back(
      RankedTensorType::get(q.drop_back(), query.getElementType()));
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  auto axis =
      normalizeAxis(loc, "layer_norm", adaptor.getAxis(), input.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normalized = input.getShape().drop_front(*axis);
  SmallVector<Value> params{adaptor.getScale()};
  if (adaptor.getBias())
    params.push_back(adaptor.getBias());
  for (Value v : params) {
    SmallVector<int64_t> shape;
    if (!OpTrait::util::getBroadcastedShape(normalized,
                                            rankedType(v).getShape(), shape) ||
        ArrayRef<int64_t>(shape) != normalized)
      return emitOptionalError(loc, "'nn.layer_norm' scale/bias of type ",
                               v.getType(),
                               " do not broadcast to the "
                               "normalized shape");
  }
  results.push_back(input);
  return success();
}

#define GPIPE_AXIS_SAME_TYPE_INFER(OP, NAME)                                   \
  LogicalResult OP::inferReturnTypes(                                          \
      MLIRContext *, std::optional<Location> loc, Adaptor adaptor,             \
      SmallVectorImpl<Type> &results) {                                        \
    RankedTensorType input = rankedType(adaptor.getInput());                   \
    if (failed(normalizeAxis(loc, NAME, adaptor.getAxis(), input.getRank())))  \
      return failure();                                                        \
    results.push_back(input);                                                  \
    return success();                                                          \
  }
GPIPE_AXIS_SAME_TYPE_INFER(SoftmaxOp, "softmax")
GPIPE_AXIS_SAME_TYPE_INFER(LogSoftmaxOp, "log_softmax")
GPIPE_AXIS_SAME_TYPE_INFER(CumSumOp, "cumsum")
#undef GPIPE_AXIS_SAME_TYPE_INFER

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  auto shape = inferWindowedShape(
      loc, "max_pool", input, adaptor.getKernelShape(), adaptor.getStrides(),
      adaptor.getPads(), adaptor.getDilations(), adaptor.getCeilMode());
  if (failed(shape))
    return failure();
  results.push_back(RankedTensorType::get(*shape, input.getElementType()));
  return success();
}

LogicalResult AvgPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  SmallVector<int64_t> dilations(adaptor.getKernelShape().size(), 1);
  auto shape = inferWindowedShape(
      loc, "avg_pool", input, adaptor.getKernelShape(), adaptor.getStrides(),
      adaptor.getPads(), dilations, adaptor.getCeilMode());
  if (failed(shape))
    return failure();
  results.push_back(RankedTensorType::get(*shape, input.getElementType()));
  return success();
}

LogicalResult
GlobalAvgPoolOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                  Adaptor adaptor,
                                  SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  if (input.getRank() < 3)
    return emitOptionalError(loc,
                             "'nn.global_avg_pool' input must have "
                             "rank >= 3, got ",
                             input);
  SmallVector<int64_t> shape(input.getShape().take_front(2));
  shape.resize(input.getRank(), 1);
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *,
                                      std::optional<Location> loc,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  int64_t rank = input.getRank();
  ArrayRef<int64_t> pads = adaptor.getPads();
  if (failed(checkArraySize(loc, "pad", "pads", pads, 2 * rank)) ||
      failed(checkBounded(loc, "pad", "pads", pads)))
    return failure();
  StringRef mode = adaptor.getMode();
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return emitOptionalError(loc,
                             "'nn.pad' mode must be constant, reflect "
                             "or edge, got '",
                             mode, "'");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t size = input.getDimSize(i) + pads[i] + pads[i + rank];
    if (size < 0)
      return emitOptionalError(loc, "'nn.pad' pads crop axis ", i,
                               " below zero");
    if (mode == "reflect" && (pads[i] >= input.getDimSize(i) ||
                              pads[i + rank] >= input.getDimSize(i)))
      return emitOptionalError(loc, "'nn.pad' reflect padding of axis ", i,
                               " must be smaller than its size");
    shape.push_back(size);
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ReshapeOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  ArrayRef<int64_t> shape = adaptor.getShape();
  if (llvm::any_of(shape, [](int64_t d) { return d < 0; }))
    return emitOptionalError(loc, "'nn.reshape' shape must be fully resolved "
                                  "(non-negative)");
  if (failed(checkBounded(loc, "reshape", "shape", shape)))
    return failure();
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d && count > (int64_t(1) << 62) / d)
      return emitOptionalError(loc, "'nn.reshape' shape has too many "
                                    "elements");
    count *= d;
  }
  if (count != input.getNumElements())
    return emitOptionalError(loc, "'nn.reshape' cannot reshape ", input, " (",
                             input.getNumElements(), " elements) to ", count,
                             " elements");
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  int64_t rank = input.getRank();
  SmallVector<bool> seen(rank, false);
  if (static_cast<int64_t>(perm.size()) != rank)
    return emitOptionalError(loc, "'nn.transpose' perm has ", perm.size(),
                             " entries for rank ", rank);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return emitOptionalError(loc,
                               "'nn.transpose' perm is not a "
                               "permutation of [0, ",
                               rank, ")");
    seen[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

namespace {
LogicalResult inferReduction(std::optional<Location> loc, StringRef opName,
                             RankedTensorType input, ArrayRef<int64_t> axes,
                             bool keepdims, SmallVectorImpl<Type> &results) {
  int64_t rank = input.getRank();
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= rank || (i > 0 && axes[i] <= axes[i - 1]))
      return emitOptionalError(loc, "'nn.", opName,
                               "' axes must be sorted, unique and in [0, ",
                               rank, ")");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!llvm::is_contained(axes, i))
      shape.push_back(input.getDimSize(i));
    else if (keepdims)
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}
} // namespace

LogicalResult ReduceMeanOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &results) {
  return inferReduction(loc, "reduce_mean", rankedType(adaptor.getInput()),
                        adaptor.getAxes(), adaptor.getKeepdims(), results);
}

LogicalResult BroadcastOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  ArrayRef<int64_t> shape = adaptor.getShape();
  if (failed(checkBounded(loc, "broadcast", "shape", shape)))
    return failure();
  SmallVector<int64_t> result;
  if (!OpTrait::util::getBroadcastedShape(input.getShape(), shape, result) ||
      ArrayRef<int64_t>(result) != shape)
    return emitOptionalError(loc, "'nn.broadcast' cannot broadcast ", input,
                             " to the shape [", shape, "]");
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ReduceSumOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &results) {
  return inferReduction(loc, "reduce_sum", rankedType(adaptor.getInput()),
                        adaptor.getAxes(), adaptor.getKeepdims(), results);
}

LogicalResult SoftmaxCrossEntropyOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  RankedTensorType logits = rankedType(adaptor.getLogits());
  RankedTensorType labels = rankedType(adaptor.getLabels());
  if (logits.getRank() != 2 || !isa<FloatType>(logits.getElementType()))
    return emitOptionalError(loc,
                             "'nn.softmax_cross_entropy' logits must be "
                             "a 2-D float tensor, got ",
                             logits);
  if (labels.getRank() != 1 || !isa<IntegerType>(labels.getElementType()) ||
      labels.getDimSize(0) != logits.getDimSize(0))
    return emitOptionalError(loc,
                             "'nn.softmax_cross_entropy' labels must be "
                             "1-D integers, one per row of the logits, "
                             "got ",
                             labels);
  results.push_back(RankedTensorType::get({}, logits.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "'nn.concat' needs at least one input");
  RankedTensorType first = rankedType(adaptor.getInputs().front());
  auto axis = normalizeAxis(loc, "concat", adaptor.getAxis(), first.getRank());
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[*axis] = 0;
  for (Value v : adaptor.getInputs()) {
    RankedTensorType t = rankedType(v);
    if (t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "'nn.concat' inputs must have the same "
                                    "rank and element type");
    for (int64_t i = 0; i < t.getRank(); ++i)
      if (i != *axis && t.getDimSize(i) != first.getDimSize(i))
        return emitOptionalError(loc, "'nn.concat' inputs differ on axis ", i);
    shape[*axis] += t.getDimSize(*axis);
  }
  results.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  size_t rank = input.getRank();
  ArrayRef<int64_t> starts = adaptor.getStarts(), ends = adaptor.getEnds(),
                    steps = adaptor.getSteps();
  if (failed(checkArraySize(loc, "slice", "starts", starts, rank)) ||
      failed(checkArraySize(loc, "slice", "ends", ends, rank)) ||
      failed(checkArraySize(loc, "slice", "steps", steps, rank)) ||
      failed(checkBounded(loc, "slice", "steps", steps)))
    return failure();
  SmallVector<int64_t> shape;
  for (size_t i = 0; i < rank; ++i) {
    int64_t dim = input.getDimSize(i), step = steps[i];
    if (step == 0)
      return emitOptionalError(loc, "'nn.slice' step of axis ", i, " is zero");
    bool inRange = step > 0 ? (starts[i] >= 0 && starts[i] <= dim &&
                               ends[i] >= 0 && ends[i] <= dim)
                            : (starts[i] >= -1 && starts[i] < dim &&
                               ends[i] >= -1 && ends[i] < dim);
    if (!inRange)
      return emitOptionalError(loc, "'nn.slice' bounds of axis ", i,
                               " are not clamped to its size ", dim);
    int64_t size = step > 0 ? (ends[i] - starts[i] + step - 1) / step
                            : (starts[i] - ends[i] - step - 1) / -step;
    shape.push_back(std::max<int64_t>(size, 0));
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &results) {
  RankedTensorType input = rankedType(adaptor.getInput());
  auto axis = normalizeAxis(loc, "split", adaptor.getAxis(), input.getRank());
  if (failed(axis))
    return failure();
  if (failed(checkBounded(loc, "split", "sizes", adaptor.getSizes())))
    return failure();
  int64_t total = 0;
  for (int64_t size : adaptor.getSizes()) {
    if (size < 0)
      return emitOptionalError(loc, "'nn.split' sizes must be non-negative");
    total += size;
    SmallVector<int64_t> shape(input.getShape());
    shape[*axis] = size;
    results.push_back(RankedTensorType::get(shape, input.getElementType()));
  }
  if (total != input.getDimSize(*axis))
    return emitOptionalError(loc, "'nn.split' sizes add up to ", total,
                             " but axis ", *axis, " has size ",
                             input.getDimSize(*axis));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &results) {
  RankedTensorType data = rankedType(adaptor.getData());
  RankedTensorType indices = rankedType(adaptor.getIndices());
  if (!indices.getElementType().isSignlessInteger(64) &&
      !indices.getElementType().isSignlessInteger(32))
    return emitOptionalError(loc,
                             "'nn.gather' indices must be i32 or i64, "
                             "got ",
                             indices.getElementType());
  auto axis = normalizeAxis(loc, "gather", adaptor.getAxis(), data.getRank());
  if (failed(axis) || data.getRank() == 0)
    return emitOptionalError(loc, "'nn.gather' needs data of rank >= 1");
  SmallVector<int64_t> shape(data.getShape().take_front(*axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(*axis + 1));
  results.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &results) {
  auto type = llvm::dyn_cast<RankedTensorType>(adaptor.getValue().getType());
  if (!type)
    return emitOptionalError(loc,
                             "'nn.constant' value must be a ranked tensor");
  results.push_back(type);
  return success();
}
