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
  if (rankedType(sum).getShape() == target.getShape())
    return sum;
  return b.create<ReshapeOp>(
      loc, ValueRange{sum},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("shape", b.getDenseI64ArrayAttr(target.getShape()))});
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

Value gemm(OpBuilder &b, Location loc, Value a, Value c, bool transA,
           bool transB, double alpha) {
  return b.create<GemmOp>(
      loc, ValueRange{a, c},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("alpha", b.getF32FloatAttr(alpha)),
          b.getNamedAttr("trans_a", b.getBoolAttr(transA)),
          b.getNamedAttr("trans_b", b.getBoolAttr(transB))});
}

} // namespace

LogicalResult ReluOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      b.create<ReluGradOp>(getLoc(), getType(), resultGrads[0], getInput()));
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
  operandGrads.push_back(b.create<ReshapeOp>(
      getLoc(), ValueRange{resultGrads[0]},
      ArrayRef<NamedAttribute>{b.getNamedAttr(
          "shape",
          b.getDenseI64ArrayAttr(rankedType(getInput()).getShape()))}));
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
  if (rankedType(g).getShape() != ArrayRef<int64_t>(kept))
    g = b.create<ReshapeOp>(loc, ValueRange{g},
                            ArrayRef<NamedAttribute>{b.getNamedAttr(
                                "shape", b.getDenseI64ArrayAttr(kept))});
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
  // dop(A) = alpha dY op(B)^T; dA is its transpose when A is transposed.
  operandGrads.push_back(ta ? gemm(b, loc, getB(), g, tb, true, alpha)
                            : gemm(b, loc, g, getB(), false, !tb, alpha));
  // dop(B) = alpha op(A)^T dY.
  operandGrads.push_back(tb ? gemm(b, loc, g, getA(), true, ta, alpha)
                            : gemm(b, loc, getA(), g, !ta, false, alpha));
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
      getLoc(), getLogits().getType(), resultGrads[0], getLogits(),
      getLabels()));
  operandGrads.push_back(Value()); // labels: not differentiable
  return success();
}

LogicalResult ConvOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                               SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value g = resultGrads[0];
  SmallVector<NamedAttribute> attrs{
      b.getNamedAttr("strides", getStridesAttr()),
      b.getNamedAttr("pads", getPadsAttr()),
      b.getNamedAttr("dilations", getDilationsAttr()),
      b.getNamedAttr("group", b.getI64IntegerAttr(getGroup()))};
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
  SmallVector<int64_t> starts(pads.take_front(rank)), ends, steps(rank, 1);
  for (int64_t i = 0; i < rank; ++i)
    ends.push_back(starts[i] + in.getDimSize(i));
  operandGrads.push_back(b.create<SliceOp>(
      getLoc(), ValueRange{resultGrads[0]},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("starts", b.getDenseI64ArrayAttr(starts)),
          b.getNamedAttr("ends", b.getDenseI64ArrayAttr(ends)),
          b.getNamedAttr("steps", b.getDenseI64ArrayAttr(steps))}));
  return success();
}

LogicalResult BatchNormOp::buildVJP(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // One op yields the three gradients; with `training` the kernel uses the
  // statistics of the batch (recomputed from the input), else mean and var.
  auto grad = b.create<BatchNormGradOp>(
      getLoc(),
      TypeRange{getInput().getType(), getScale().getType(),
                getBias().getType()},
      ValueRange{resultGrads[0], getInput(), getScale(), getMean(), getVar()},
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
