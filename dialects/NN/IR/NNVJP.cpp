//===- NNVJP.cpp - Reverse-mode derivative rules of nn ops ----------------===//
//
// VJPOpInterface: for each differentiable forward op, the gradients of its
// operands from the gradients of its results. Broadcast operands get their
// gradient summed back to their own shape.
//
//===----------------------------------------------------------------------===//
#include "NN/IR/NNOps.h"

using namespace mlir;
using namespace gpipe::nn;

namespace {

RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// `v` reshaped to `shape` (itself if it has that shape).
Value reshapeTo(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (rankedType(v).getShape() == shape)
    return v;
  return b.create<ReshapeOp>(loc, ValueRange{v},
                             ArrayRef<NamedAttribute>{b.getNamedAttr(
                                 "shape", b.getDenseI64ArrayAttr(shape))});
}

/// The slice [starts, ends) of `v` with unit steps.
Value unitSlice(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> starts,
                ArrayRef<int64_t> ends) {
  SmallVector<int64_t> steps(starts.size(), 1);
  return b.create<SliceOp>(
      loc, ValueRange{v},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("starts", b.getDenseI64ArrayAttr(starts)),
          b.getNamedAttr("ends", b.getDenseI64ArrayAttr(ends)),
          b.getNamedAttr("steps", b.getDenseI64ArrayAttr(steps))});
}

/// Sums `grad` over the axes that NumPy broadcasting added or expanded to
/// reach it from `target`, and reshapes to `target`.
Value unbroadcast(OpBuilder &b, Location loc, Value grad,
                  RankedTensorType target) {
  RankedTensorType type = rankedType(grad);
  if (type.getShape() == target.getShape())
    return grad;
  int64_t offset = type.getRank() - target.getRank();
  SmallVector<int64_t> axes;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (i < offset ||
        (target.getDimSize(i - offset) == 1 && type.getDimSize(i) != 1))
      axes.push_back(i);
  Value sum = grad;
  if (!axes.empty())
    sum = b.create<ReduceSumOp>(
        loc, ValueRange{grad},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
            b.getNamedAttr("keepdims", b.getBoolAttr(true))});
  return reshapeTo(b, loc, sum, target.getShape());
}

Value scalarConstant(OpBuilder &b, Location loc, Type element, double value) {
  auto type = RankedTensorType::get({}, element);
  return b.create<ConstantOp>(
      loc, ValueRange{},
      ArrayRef<NamedAttribute>{b.getNamedAttr(
          "value",
          DenseElementsAttr::get(type, b.getFloatAttr(element, value)))});
}

template <typename OpTy>
Value binary(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  return b.create<OpTy>(loc, ValueRange{lhs, rhs}, ArrayRef<NamedAttribute>{});
}

/// A product of a gradient: in the forward product's compute type (the
/// gradients of a bfloat16 product multiply in bfloat16, as autocast's do).
Value gemm(OpBuilder &b, Location loc, Value a, Value c, bool transA,
           bool transB, double alpha, StringRef computeType) {
  return b.create<GemmOp>(
      loc, ValueRange{a, c},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("alpha", b.getF32FloatAttr(alpha)),
          b.getNamedAttr("trans_a", b.getBoolAttr(transA)),
          b.getNamedAttr("trans_b", b.getBoolAttr(transB)),
          b.getNamedAttr("compute_type", b.getStringAttr(computeType))});
}

} // namespace

LogicalResult ReluOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      b.create<ReluGradOp>(getLoc(), getType(), resultGrads[0], getInput()));
  return success();
}

LogicalResult LeakyReluOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<LeakyReluGradOp>(
      getLoc(), getType(), resultGrads[0], getInput(), getAlphaAttr()));
  return success();
}

LogicalResult NegOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<NegOp>(getLoc(), ValueRange{resultGrads[0]},
                                         ArrayRef<NamedAttribute>{}));
  return success();
}

LogicalResult ClipOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<ClipGradOp>(getLoc(), getType(),
                                              resultGrads[0], getInput(),
                                              getMinAttr(), getMaxAttr()));
  return success();
}

LogicalResult HardSigmoidOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      b.create<HardSigmoidGradOp>(getLoc(), getType(), resultGrads[0],
                                  getInput(), getAlphaAttr(), getBetaAttr()));
  return success();
}

LogicalResult HardSwishOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<HardSwishGradOp>(getLoc(), getType(),
                                                   resultGrads[0], getInput()));
  return success();
}

LogicalResult GatherOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  RankedTensorType data = rankedType(getData());
  // I64Attr reads back unsigned: a negative axis wraps.
  int64_t axis = static_cast<int64_t>(getAxis());
  if (axis < 0)
    axis += data.getRank();
  operandGrads.push_back(b.create<GatherGradOp>(
      getLoc(), data, resultGrads[0], getIndices(), b.getI64IntegerAttr(axis)));
  operandGrads.push_back(Value()); // indices: not differentiable
  return success();
}

LogicalResult CumSumOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  // Input j reaches every output the sum runs over after it: the gradient
  // is the running sum of the output gradient in the other direction.
  operandGrads.push_back(b.create<CumSumOp>(getLoc(), resultGrads[0],
                                            getAxisAttr(), getExclusiveAttr(),
                                            b.getBoolAttr(!getReverse())));
  return success();
}

LogicalResult BroadcastOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      unbroadcast(b, getLoc(), resultGrads[0], rankedType(getInput())));
  return success();
}

LogicalResult CastOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  // Between floating-point types the gradient is cast back; a cast to or
  // from an integer type passes no gradient.
  RankedTensorType in = rankedType(getInput());
  if (!isa<FloatType>(in.getElementType()) ||
      !isa<FloatType>(rankedType(getOutput()).getElementType())) {
    operandGrads.push_back(Value());
    return success();
  }
  operandGrads.push_back(b.create<CastOp>(getLoc(), in, resultGrads[0]));
  return success();
}

LogicalResult AddOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  Value g = resultGrads[0];
  operandGrads.push_back(unbroadcast(b, getLoc(), g, rankedType(getLhs())));
  operandGrads.push_back(unbroadcast(b, getLoc(), g, rankedType(getRhs())));
  return success();
}

LogicalResult SubOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  Value g = resultGrads[0];
  Value minusOne =
      scalarConstant(b, getLoc(), rankedType(g).getElementType(), -1.0);
  operandGrads.push_back(unbroadcast(b, getLoc(), g, rankedType(getLhs())));
  operandGrads.push_back(unbroadcast(b, getLoc(),
                                     binary<MulOp>(b, getLoc(), g, minusOne),
                                     rankedType(getRhs())));
  return success();
}

LogicalResult MulOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  Value g = resultGrads[0];
  operandGrads.push_back(unbroadcast(b, getLoc(),
                                     binary<MulOp>(b, getLoc(), g, getRhs()),
                                     rankedType(getLhs())));
  operandGrads.push_back(unbroadcast(b, getLoc(),
                                     binary<MulOp>(b, getLoc(), g, getLhs()),
                                     rankedType(getRhs())));
  return success();
}

LogicalResult ReshapeOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(reshapeTo(b, getLoc(), resultGrads[0],
                                   rankedType(getInput()).getShape()));
  return success();
}

namespace {
/// The gradient of a reduction over `axes` of `input`: the result gradient
/// repeated over the reduced axes, times `scale`.
Value expandReduction(OpBuilder &b, Location loc, Value g, Value input,
                      ArrayRef<int64_t> axes, double scale) {
  RankedTensorType inType = rankedType(input);
  SmallVector<int64_t> kept(inType.getShape());
  for (int64_t a : axes)
    kept[a] = 1;
  g = reshapeTo(b, loc, g, kept);
  if (scale != 1.0)
    g = binary<MulOp>(b, loc, g,
                      scalarConstant(b, loc, inType.getElementType(), scale));
  return b.create<BroadcastOp>(
      loc, ValueRange{g},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("shape", b.getDenseI64ArrayAttr(inType.getShape()))});
}
} // namespace

LogicalResult ReduceSumOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      expandReduction(b, getLoc(), resultGrads[0], getInput(), getAxes(), 1.0));
  return success();
}

LogicalResult ReduceMeanOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  int64_t count = 1;
  for (int64_t a : getAxes())
    count *= rankedType(getInput()).getDimSize(a);
  operandGrads.push_back(expandReduction(b, getLoc(), resultGrads[0],
                                         getInput(), getAxes(),
                                         1.0 / std::max<int64_t>(count, 1)));
  return success();
}

LogicalResult GemmOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  // Y = alpha * op(A) op(B) + beta * C, op = optional transpose.
  Location loc = getLoc();
  Value g = resultGrads[0];
  double alpha = getAlpha().convertToDouble();
  bool ta = getTransA(), tb = getTransB();
  StringRef type = getComputeType();
  // dop(A) = alpha dY op(B)^T; dA is its transpose when A is transposed.
  operandGrads.push_back(ta ? gemm(b, loc, getB(), g, tb, true, alpha, type)
                            : gemm(b, loc, g, getB(), false, !tb, alpha, type));
  // dop(B) = alpha op(A)^T dY.
  operandGrads.push_back(tb ? gemm(b, loc, g, getA(), true, ta, alpha, type)
                            : gemm(b, loc, getA(), g, !ta, false, alpha, type));
  if (Value c = getC()) {
    Value dc = unbroadcast(b, loc, g, rankedType(c));
    double beta = getBeta().convertToDouble();
    if (beta != 1.0)
      dc = binary<MulOp>(
          b, loc, dc,
          scalarConstant(b, loc, rankedType(c).getElementType(), beta));
    operandGrads.push_back(dc);
  }
  return success();
}

LogicalResult
SoftmaxCrossEntropyOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<SoftmaxCrossEntropyGradOp>(
      getLoc(), getLogits().getType(), resultGrads[0], getLogits(), getLabels(),
      getIgnoreIndexAttr()));
  operandGrads.push_back(Value()); // labels: not differentiable
  return success();
}

// The window and compute type of a convolution op (conv, conv_grad_input),
// for the ops of its gradient.
template <typename ConvLike>
static SmallVector<NamedAttribute> convWindowAttrs(OpBuilder &b, ConvLike op) {
  return {b.getNamedAttr("strides", op.getStridesAttr()),
          b.getNamedAttr("pads", op.getPadsAttr()),
          b.getNamedAttr("dilations", op.getDilationsAttr()),
          b.getNamedAttr("group", b.getI64IntegerAttr(op.getGroup())),
          b.getNamedAttr("compute_type", op.getComputeTypeAttr())};
}

// out = conv_grad_input(dy, W) is linear in each operand: its adjoint in
// dy is the convolution of the output gradient, in W the weight gradient
// of that convolution (the output gradient as its input, dy as its
// output's gradient).
LogicalResult ConvGradInputOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  SmallVector<NamedAttribute> attrs = convWindowAttrs(b, *this);
  operandGrads.push_back(b.create<ConvOp>(loc, getGradOutput().getType(),
                                          ValueRange{g, getWeight()}, attrs));
  operandGrads.push_back(b.create<ConvGradWeightOp>(
      loc, getWeight().getType(), ValueRange{getGradOutput(), g}, attrs));
  return success();
}

LogicalResult ConvOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  SmallVector<NamedAttribute> attrs = convWindowAttrs(b, *this);
  operandGrads.push_back(b.create<ConvGradInputOp>(
      loc, getInput().getType(), ValueRange{g, getWeight()}, attrs));
  operandGrads.push_back(b.create<ConvGradWeightOp>(
      loc, getWeight().getType(), ValueRange{g, getInput()}, attrs));
  if (getBias()) {
    SmallVector<int64_t> axes{0};
    for (int64_t i = 2; i < rankedType(g).getRank(); ++i)
      axes.push_back(i);
    operandGrads.push_back(b.create<ReduceSumOp>(
        loc, ValueRange{g},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
            b.getNamedAttr("keepdims", b.getBoolAttr(false))}));
  }
  return success();
}

LogicalResult MaxPoolOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<MaxPoolGradOp>(
      getLoc(), getInput().getType(), ValueRange{resultGrads[0], getInput()},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("kernel_shape", getKernelShapeAttr()),
          b.getNamedAttr("strides", getStridesAttr()),
          b.getNamedAttr("pads", getPadsAttr()),
          b.getNamedAttr("dilations", getDilationsAttr()),
          b.getNamedAttr("ceil_mode", b.getBoolAttr(getCeilMode()))}));
  return success();
}

LogicalResult AvgPoolOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<AvgPoolGradOp>(
      getLoc(), getInput().getType(), ValueRange{resultGrads[0]},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("kernel_shape", getKernelShapeAttr()),
          b.getNamedAttr("strides", getStridesAttr()),
          b.getNamedAttr("pads", getPadsAttr()),
          b.getNamedAttr("ceil_mode", b.getBoolAttr(getCeilMode())),
          b.getNamedAttr("count_include_pad",
                         b.getBoolAttr(getCountIncludePad()))}));
  return success();
}

LogicalResult GlobalAvgPoolOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  // Every input element gets the gradient of its mean, 1 / (spatial size).
  RankedTensorType in = rankedType(getInput());
  int64_t spatial = 1;
  for (int64_t d : in.getShape().drop_front(2))
    spatial *= d;
  Value scaled = binary<MulOp>(
      b, getLoc(), resultGrads[0],
      scalarConstant(b, getLoc(), in.getElementType(), 1.0 / spatial));
  operandGrads.push_back(b.create<BroadcastOp>(
      getLoc(), ValueRange{scaled},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("shape", b.getDenseI64ArrayAttr(in.getShape()))}));
  return success();
}

LogicalResult PadOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  // Constant padding: the input's gradient is the interior of the output's.
  ArrayRef<int64_t> pads = getPads();
  if (getMode() != "constant" ||
      llvm::any_of(pads, [](int64_t p) { return p < 0; }))
    return emitOpError("has a VJP rule only for non-negative constant "
                       "padding yet");
  RankedTensorType in = rankedType(getInput());
  int64_t rank = in.getRank();
  SmallVector<int64_t> starts(pads.take_front(rank)), ends;
  for (int64_t i = 0; i < rank; ++i)
    ends.push_back(starts[i] + in.getDimSize(i));
  operandGrads.push_back(unitSlice(b, getLoc(), resultGrads[0], starts, ends));
  return success();
}

bool BatchNormOp::isDifferentiableResult(unsigned index) {
  return index == 0; // not saved_mean and saved_var
}

LogicalResult BatchNormOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // One op yields the three gradients from the statistics the forward
  // normalized with (saved_mean and saved_var: the batch's when training).
  // Those two results are not differentiated (isDifferentiableResult).
  auto grad = b.create<BatchNormGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), getScale().getType(),
                getBias().getType()},
      ValueRange{resultGrads[0], getInput(), getScale(), getSavedMean(),
                 getSavedVar()},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("epsilon",
                         b.getF32FloatAttr(getEpsilon().convertToDouble())),
          b.getNamedAttr("training", b.getBoolAttr(getTraining()))});
  operandGrads.push_back(grad.getGradInput());
  operandGrads.push_back(grad.getGradScale());
  operandGrads.push_back(grad.getGradBias());
  operandGrads.push_back(Value()); // running statistics: state, not trained
  operandGrads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Activations and arithmetic
//===----------------------------------------------------------------------===//

namespace {
Value one(OpBuilder &b, Location loc, Value like) {
  return scalarConstant(b, loc, rankedType(like).getElementType(), 1.0);
}
} // namespace

LogicalResult SigmoidOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  // g * y * (1 - y)
  Location loc = getLoc();
  Value y = getOutput();
  Value slope =
      binary<MulOp>(b, loc, y, binary<SubOp>(b, loc, one(b, loc, y), y));
  operandGrads.push_back(binary<MulOp>(b, loc, resultGrads[0], slope));
  return success();
}

LogicalResult TanhOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  // g * (1 - y^2)
  Location loc = getLoc();
  Value y = getOutput();
  Value slope =
      binary<SubOp>(b, loc, one(b, loc, y), binary<MulOp>(b, loc, y, y));
  operandGrads.push_back(binary<MulOp>(b, loc, resultGrads[0], slope));
  return success();
}

LogicalResult SqrtOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  // g * 0.5 / y
  Location loc = getLoc();
  Value half = scalarConstant(b, loc, getType().getElementType(), 0.5);
  operandGrads.push_back(binary<DivOp>(
      b, loc, binary<MulOp>(b, loc, resultGrads[0], half), getOutput()));
  return success();
}

LogicalResult ErfOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      b.create<ErfGradOp>(getLoc(), getType(), resultGrads[0], getInput()));
  return success();
}

LogicalResult GeluOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<GeluGradOp>(
      getLoc(), getType(), resultGrads[0], getInput(), getApproximateAttr()));
  return success();
}

LogicalResult DropoutOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  if (!isRandom()) {
    operandGrads.push_back(resultGrads[0]); // the identity
    return success();
  }
  if (!getStreamAttr())
    return emitOpError("random dropout needs a stream number (gpipe-autodiff "
                       "assigns them)");
  operandGrads.push_back(b.create<DropoutGradOp>(
      getLoc(), getType(), resultGrads[0], getRatioAttr(), getStreamAttr()));
  return success();
}

LogicalResult DivOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  // d lhs = g / rhs; d rhs = -g * y / rhs (y = lhs / rhs).
  Location loc = getLoc();
  Value g = resultGrads[0];
  if (!isa<FloatType>(getType().getElementType()))
    return emitOpError("has a VJP rule for floating-point types only");
  operandGrads.push_back(unbroadcast(b, loc, binary<DivOp>(b, loc, g, getRhs()),
                                     rankedType(getLhs())));
  Value minusOne = scalarConstant(b, loc, getType().getElementType(), -1.0);
  Value dr =
      binary<DivOp>(b, loc, binary<MulOp>(b, loc, g, getOutput()), getRhs());
  operandGrads.push_back(unbroadcast(
      b, loc, binary<MulOp>(b, loc, dr, minusOne), rankedType(getRhs())));
  return success();
}

LogicalResult PowOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  // d lhs = g * rhs * lhs^(rhs - 1). The exponent must be a constant: its
  // own gradient (g * y * log(lhs)) is not built.
  Location loc = getLoc();
  Type element = getType().getElementType();
  if (!isa<FloatType>(element))
    return emitOpError("has a VJP rule for floating-point types only");
  if (!getRhs().getDefiningOp<ConstantOp>())
    return emitOpError("has a VJP rule for constant exponents only");
  Value exponent = getRhs();
  if (rankedType(exponent).getElementType() != element)
    exponent = b.create<CastOp>(
        loc, RankedTensorType::get(rankedType(exponent).getShape(), element),
        exponent);
  Value lowered = binary<PowOp>(
      b, loc, getLhs(),
      binary<SubOp>(b, loc, exponent, scalarConstant(b, loc, element, 1.0)));
  Value d = binary<MulOp>(b, loc, resultGrads[0],
                          binary<MulOp>(b, loc, exponent, lowered));
  operandGrads.push_back(unbroadcast(b, loc, d, rankedType(getLhs())));
  operandGrads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Matrix products, normalization, softmax
//===----------------------------------------------------------------------===//

namespace {
/// `v` with its last two axes swapped.
Value transposeLastTwo(OpBuilder &b, Location loc, Value v) {
  int64_t rank = rankedType(v).getRank();
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i)
    perm.push_back(i);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return b.create<TransposeOp>(loc, ValueRange{v},
                               ArrayRef<NamedAttribute>{b.getNamedAttr(
                                   "perm", b.getDenseI64ArrayAttr(perm))});
}

} // namespace

LogicalResult MatMulOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0], lhs = getLhs(), rhs = getRhs();
  RankedTensorType lt = rankedType(lhs), rt = rankedType(rhs);
  if (lt.getRank() < 2 || rt.getRank() < 2)
    return emitOpError("has a VJP rule for operands of rank 2 or more only");
  NamedAttribute type = b.getNamedAttr("compute_type", getComputeTypeAttr());
  // dA = g B^T, summed over the batch axes A was broadcast along.
  Value da = b.create<MatMulOp>(
      loc, ValueRange{g, transposeLastTwo(b, loc, rhs)}, type);
  operandGrads.push_back(unbroadcast(b, loc, da, lt));
  if (rt.getRank() == 2) {
    // A shared weight: dB = A^T g with the batch axes folded into rows.
    int64_t k = lt.getShape().back();
    int64_t n = rt.getDimSize(1);
    int64_t rows = lt.getNumElements() / k;
    Value a2 = reshapeTo(b, loc, lhs, {rows, k});
    Value g2 = reshapeTo(b, loc, g, {rows, n});
    operandGrads.push_back(
        gemm(b, loc, a2, g2, true, false, 1.0, getComputeType()));
    return success();
  }
  Value db = b.create<MatMulOp>(
      loc, ValueRange{transposeLastTwo(b, loc, lhs), g}, type);
  operandGrads.push_back(unbroadcast(b, loc, db, rt));
  return success();
}

LogicalResult LayerNormOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Type scaleType = getScale().getType();
  auto grad = b.create<LayerNormGradOp>(
      getLoc(), TypeRange{getInput().getType(), scaleType, scaleType},
      ValueRange{resultGrads[0], getInput(), getScale()},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("axis", b.getI64IntegerAttr(getAxis())),
          b.getNamedAttr("epsilon",
                         b.getF32FloatAttr(getEpsilon().convertToDouble()))});
  operandGrads.push_back(grad.getGradInput());
  operandGrads.push_back(grad.getGradScale());
  if (getBias()) {
    if (getBias().getType() != scaleType)
      return emitOpError("has a VJP rule only for a bias of the scale's shape");
    operandGrads.push_back(grad.getGradBias());
  }
  return success();
}

namespace {
/// Softmax and log-softmax: one gradient op from the forward's output.
template <typename GradOp, typename ForwardOp>
LogicalResult softmaxVJP(ForwardOp op, OpBuilder &b, ValueRange resultGrads,
                         SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(b.create<GradOp>(
      op.getLoc(), op.getType(), ValueRange{resultGrads[0], op.getOutput()},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("axis", b.getI64IntegerAttr(op.getAxis()))}));
  return success();
}
} // namespace

LogicalResult SoftmaxOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                  SmallVectorImpl<Value> &operandGrads) {
  return softmaxVJP<SoftmaxGradOp>(*this, b, resultGrads, operandGrads);
}

LogicalResult LogSoftmaxOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  return softmaxVJP<LogSoftmaxGradOp>(*this, b, resultGrads, operandGrads);
}

bool AttentionOp::isDifferentiableResult(unsigned index) {
  return index == 0; // not logsumexp
}

LogicalResult AttentionOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // One op recomputes each tile's probabilities from logsumexp and yields
  // the three gradients. The mask gets none: gpipe-fuse-attention forms
  // the op only for masks that do not depend on what is trained.
  SmallVector<Value> operands{resultGrads[0], getQuery(),  getKey(),
                              getValue(),     getOutput(), getLogsumexp()};
  if (getMask())
    operands.push_back(getMask());
  auto grad = b.create<AttentionGradOp>(
      getLoc(),
      TypeRange{getQuery().getType(), getKey().getType(), getValue().getType()},
      operands,
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("scale",
                         b.getF32FloatAttr(getScale().convertToDouble())),
          b.getNamedAttr("causal", b.getBoolAttr(getCausal())),
          b.getNamedAttr(
              "dropout_ratio",
              b.getF32FloatAttr(getDropoutRatio().convertToDouble())),
          b.getNamedAttr("stream", b.getI64IntegerAttr(getStream()))});
  operandGrads.push_back(grad.getGradQuery());
  operandGrads.push_back(grad.getGradKey());
  operandGrads.push_back(grad.getGradValue());
  if (getMask())
    operandGrads.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = static_cast<int64_t>(i);
  operandGrads.push_back(
      b.create<TransposeOp>(getLoc(), ValueRange{resultGrads[0]},
                            ArrayRef<NamedAttribute>{b.getNamedAttr(
                                "perm", b.getDenseI64ArrayAttr(inverse))}));
  return success();
}

/// Zero-pads `v` by `pads` (begins, then ends, one per axis).
static Value zeroPad(OpBuilder &b, Location loc, Value v,
                     ArrayRef<int64_t> pads) {
  return b.create<PadOp>(
      loc, ValueRange{v},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)),
          b.getNamedAttr("mode", b.getStringAttr("constant")),
          b.getNamedAttr("value", b.getF64FloatAttr(0.0))});
}

LogicalResult SliceOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  // The gradient is the result's, zero-padded back in place. An axis of
  // step s > 1 (PatchMerging's x[..., 0::2, 0::2, :]) is first spread
  // out: each gradient element followed by s - 1 zeros (an axis of 1
  // inserted after it, padded to s, merged back), trimmed to the input's
  // extent, as if the slice had been a unit one over that span.
  if (llvm::any_of(getSteps(), [](int64_t s) { return s < 1; }))
    return emitOpError("has a VJP rule for positive steps only");
  Location loc = getLoc();
  RankedTensorType in = rankedType(getInput());
  int64_t rank = in.getRank();
  Value g = resultGrads[0];
  SmallVector<int64_t> starts(getStarts()), ends(getEnds());
  for (int64_t a = 0; a < rank; ++a) {
    int64_t step = getSteps()[a];
    if (step == 1)
      continue;
    SmallVector<int64_t> shape(rankedType(g).getShape());
    int64_t n = shape[a];
    SmallVector<int64_t> spread(shape);
    spread.insert(spread.begin() + a + 1, 1);
    g = reshapeTo(b, loc, g, spread);
    SmallVector<int64_t> pads(2 * (rank + 1), 0);
    pads[(rank + 1) + a + 1] = step - 1;
    g = zeroPad(b, loc, g, pads);
    shape[a] = n * step;
    g = reshapeTo(b, loc, g, shape);
    int64_t span = std::min(n * step, in.getDimSize(a) - starts[a]);
    if (span < n * step) {
      SmallVector<int64_t> from(rank, 0), to(shape);
      to[a] = span;
      g = unitSlice(b, loc, g, from, to);
    }
    ends[a] = starts[a] + span;
  }
  SmallVector<int64_t> pads(starts);
  for (auto [i, end] : llvm::enumerate(ends))
    pads.push_back(in.getDimSize(i) - end);
  operandGrads.push_back(zeroPad(b, loc, g, pads));
  return success();
}

LogicalResult ConcatOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                 SmallVectorImpl<Value> &operandGrads) {
  RankedTensorType out = getType();
  int64_t axis = getAxis(), offset = 0;
  if (axis < 0)
    axis += out.getRank();
  for (Value input : getInputs()) {
    RankedTensorType t = rankedType(input);
    SmallVector<int64_t> starts(out.getRank(), 0), ends(out.getShape());
    starts[axis] = offset;
    offset += t.getDimSize(axis);
    ends[axis] = offset;
    operandGrads.push_back(
        unitSlice(b, getLoc(), resultGrads[0], starts, ends));
  }
  return success();
}

LogicalResult SplitOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      b.create<ConcatOp>(getLoc(), ValueRange(resultGrads),
                         ArrayRef<NamedAttribute>{b.getNamedAttr(
                             "axis", b.getI64IntegerAttr(getAxis()))}));
  return success();
}

LogicalResult ModOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  // fmod(a, b) = a - trunc(a / b) * b: d a = g; d b = -g * trunc(a / b),
  // with trunc(a / b) = (a - y) / b exactly where y = fmod(a, b).
  Location loc = getLoc();
  Value g = resultGrads[0];
  if (!isa<FloatType>(getType().getElementType()))
    return emitOpError("has a VJP rule for floating-point types only");
  operandGrads.push_back(unbroadcast(b, loc, g, rankedType(getLhs())));
  Value quotient = binary<DivOp>(
      b, loc, binary<SubOp>(b, loc, getLhs(), getOutput()), getRhs());
  Value minusOne = scalarConstant(b, loc, getType().getElementType(), -1.0);
  operandGrads.push_back(unbroadcast(
      b, loc,
      binary<MulOp>(b, loc, binary<MulOp>(b, loc, g, quotient), minusOne),
      rankedType(getRhs())));
  return success();
}

// Comparisons and logic have i1 results: no gradient reaches them, and
// none leaves them.
#define GPIPE_NO_GRADIENT_VJP(OP)                                              \
  LogicalResult OP::buildVJP(OpBuilder &, ValueRange,                          \
                             SmallVectorImpl<Value> &operandGrads) {           \
    operandGrads.append(getOperation()->getNumOperands(), Value());            \
    return success();                                                          \
  }
GPIPE_NO_GRADIENT_VJP(EqualOp)
GPIPE_NO_GRADIENT_VJP(LessOp)
GPIPE_NO_GRADIENT_VJP(LessEqualOp)
GPIPE_NO_GRADIENT_VJP(GreaterOp)
GPIPE_NO_GRADIENT_VJP(GreaterEqualOp)
GPIPE_NO_GRADIENT_VJP(AndOp)
GPIPE_NO_GRADIENT_VJP(OrOp)
GPIPE_NO_GRADIENT_VJP(XorOp)
GPIPE_NO_GRADIENT_VJP(NotOp)
#undef GPIPE_NO_GRADIENT_VJP

LogicalResult WhereOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                SmallVectorImpl<Value> &operandGrads) {
  // Each branch gets the gradient where it was taken and exactly zero
  // elsewhere (a -inf fill passes nothing back).
  Location loc = getLoc();
  Value g = resultGrads[0];
  Value zero = scalarConstant(b, loc, getType().getElementType(), 0.0);
  auto select = [&](Value x, Value y) {
    return b.create<WhereOp>(loc, ValueRange{getCondition(), x, y},
                             ArrayRef<NamedAttribute>{});
  };
  operandGrads.push_back(Value()); // the condition
  operandGrads.push_back(
      unbroadcast(b, loc, select(g, zero), rankedType(getX())));
  operandGrads.push_back(
      unbroadcast(b, loc, select(zero, g), rankedType(getY())));
  return success();
}
