//===- NNOps.cpp - Verifiers and folders of nn ops ------------------------===//
//
// Shape rules of forward ops live in NNShapeInference.cpp (their verifier is
// the inferred-type check); this file holds the remaining verifiers.
//
//===----------------------------------------------------------------------===//
#include "NN/IR/NNOps.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace gpipe::nn;

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

LogicalResult ModOp::verify() {
  Type element = cast<RankedTensorType>(getType()).getElementType();
  if (isa<FloatType>(element) && !getFmod())
    return emitOpError("on floating-point tensors needs fmod = true (the "
                       "remainder with the sign of the dividend)");
  return success();
}

LogicalResult NotOp::verify() {
  if (!cast<RankedTensorType>(getType()).getElementType().isInteger(1))
    return emitOpError("operand must be an i1 tensor, got ") << getType();
  return success();
}

LogicalResult DropoutOp::verify() {
  float ratio = getRatio().convertToFloat();
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return emitOpError("ratio must be in [0, 1), got ") << ratio;
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult PadOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType() &&
      llvm::all_of(getPads(), [](int64_t p) { return p == 0; }))
    return getInput();
  return {};
}

namespace {
RankedTensorType rankedType(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

LogicalResult verifySameType(Operation *op, Value a, Value b, StringRef what) {
  if (a.getType() != b.getType())
    return op->emitOpError() << what << " must have the same type, got "
                             << a.getType() << " and " << b.getType();
  return success();
}

LogicalResult verifyPerChannel(Operation *op, Value input,
                               ValueRange perChannel, ValueRange gradients) {
  RankedTensorType inputType = rankedType(input);
  if (inputType.getRank() < 2)
    return op->emitOpError("input must have rank >= 2");
  int64_t channels = inputType.getDimSize(1);
  SmallVector<Value> all(perChannel);
  llvm::append_range(all, gradients);
  for (Value v : all) {
    RankedTensorType t = rankedType(v);
    if (t.getRank() != 1 || t.getDimSize(0) != channels)
      return op->emitOpError("per-channel operands and results must be 1-D "
                             "of size ")
             << channels << ", got " << t;
  }
  return success();
}
} // namespace

LogicalResult ConvGradInputOp::verify() {
  RankedTensorType grad = rankedType(getGradOutput());
  RankedTensorType weight = rankedType(getWeight());
  RankedTensorType result = rankedType(getGradInput());
  if (grad.getRank() != weight.getRank() || result.getRank() != grad.getRank())
    return emitOpError("operands and result must have the same rank");
  if (grad.getDimSize(1) != weight.getDimSize(0))
    return emitOpError("grad_output channels must equal the filter count");
  if (result.getDimSize(1) !=
      weight.getDimSize(1) * static_cast<int64_t>(getGroup()))
    return emitOpError("grad_input channels must equal weight input channels "
                       "times group");
  // The convolution of the result's shape has grad_output's spatial shape
  // (rows past its last window, a transposed convolution's output
  // padding, included).
  int64_t spatial = grad.getRank() - 2;
  ArrayRef<int64_t> strides = getStrides(), pads = getPads(),
                    dilations = getDilations();
  if (static_cast<int64_t>(strides.size()) != spatial ||
      static_cast<int64_t>(dilations.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    return emitOpError("needs ") << spatial << " strides and dilations and "
                                 << 2 * spatial << " pads";
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t window = (weight.getDimSize(i + 2) - 1) * dilations[i] + 1;
    int64_t span =
        result.getDimSize(i + 2) + pads[i] + pads[i + spatial] - window;
    if (strides[i] < 1 || span < 0 ||
        span / strides[i] + 1 != grad.getDimSize(i + 2))
      return emitOpError("grad_input ")
             << result << " is not the input of a convolution with output "
             << grad << " (spatial axis " << i << ")";
  }
  return success();
}

LogicalResult ConvGradWeightOp::verify() {
  RankedTensorType grad = rankedType(getGradOutput());
  RankedTensorType input = rankedType(getInput());
  RankedTensorType result = rankedType(getGradWeight());
  if (grad.getRank() != input.getRank() || result.getRank() != grad.getRank())
    return emitOpError("operands and result must have the same rank");
  if (result.getDimSize(0) != grad.getDimSize(1) ||
      result.getDimSize(1) * static_cast<int64_t>(getGroup()) !=
          input.getDimSize(1))
    return emitOpError("grad_weight shape ")
           << result << " does not match grad_output and input channels";
  return success();
}

LogicalResult MaxPoolGradOp::verify() {
  return verifySameType(*this, getInput(), getGradInput(), "input and result");
}

LogicalResult AvgPoolGradOp::verify() {
  if (rankedType(getGradOutput()).getRank() !=
      rankedType(getGradInput()).getRank())
    return emitOpError("grad_output and result must have the same rank");
  return success();
}

LogicalResult BatchNormGradOp::verify() {
  if (failed(verifySameType(*this, getGradOutput(), getInput(),
                            "grad_output and input")) ||
      failed(verifySameType(*this, getInput(), getGradInput(),
                            "input and grad_input")))
    return failure();
  return verifyPerChannel(*this, getInput(), {getScale(), getMean(), getVar()},
                          {getGradScale(), getGradBias()});
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifySameType(*this, getGradOutput(), getInput(),
                            "grad_output and input")) ||
      failed(verifySameType(*this, getInput(), getGradInput(),
                            "input and grad_input")))
    return failure();
  if (getScale().getType() != getGradScale().getType() ||
      getScale().getType() != getGradBias().getType())
    return emitOpError("grad_scale and grad_bias must have the scale's type");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifySameType(*this, getGradOutput(), getOutput(),
                            "grad_output and output")) ||
      failed(verifySameType(*this, getQuery(), getGradQuery(),
                            "query and grad_query")) ||
      failed(
          verifySameType(*this, getKey(), getGradKey(), "key and grad_key")) ||
      failed(verifySameType(*this, getValue(), getGradValue(),
                            "value and grad_value")))
    return failure();
  auto output = cast<RankedTensorType>(getOutput().getType());
  auto logsumexp = cast<RankedTensorType>(getLogsumexp().getType());
  if (logsumexp.getShape() != output.getShape().drop_back())
    return emitOpError("logsumexp must be the output's shape without its "
                       "last dimension, got ")
           << logsumexp;
  return success();
}

LogicalResult SoftmaxGradOp::verify() {
  return verifySameType(*this, getGradOutput(), getOutput(),
                        "grad_output and output");
}

LogicalResult LogSoftmaxGradOp::verify() {
  return verifySameType(*this, getGradOutput(), getOutput(),
                        "grad_output and output");
}

LogicalResult GatherGradOp::verify() {
  auto data = cast<RankedTensorType>(getGradData().getType());
  auto indices = cast<RankedTensorType>(getIndices().getType());
  auto grad = cast<RankedTensorType>(getGradOutput().getType());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= data.getRank())
    return emitOpError("axis ")
           << axis << " is out of range for rank " << data.getRank();
  SmallVector<int64_t> gathered(data.getShape().take_front(axis));
  llvm::append_range(gathered, indices.getShape());
  llvm::append_range(gathered, data.getShape().drop_front(axis + 1));
  if (grad.getShape() != ArrayRef<int64_t>(gathered) ||
      grad.getElementType() != data.getElementType())
    return emitOpError("grad_output ")
           << grad << " is not the gather of " << data << " by " << indices;
  return success();
}

LogicalResult GeluGradOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\"");
  return verifySameType(*this, getGradOutput(), getInput(),
                        "grad_output and input");
}

LogicalResult DropoutGradOp::verify() {
  float ratio = getRatio().convertToFloat();
  if (!(ratio > 0.0f && ratio < 1.0f))
    return emitOpError("ratio must be in (0, 1), got ") << ratio;
  return verifySameType(*this, getGradOutput(), getGradInput(),
                        "grad_output and result");
}

LogicalResult SoftmaxCrossEntropyGradOp::verify() {
  if (rankedType(getGradLoss()).getRank() != 0)
    return emitOpError("grad_loss must be a scalar");
  return verifySameType(*this, getLogits(), getGradLogits(),
                        "logits and grad_logits");
}

#define GET_OP_CLASSES
#include "NN/IR/NNOps.cpp.inc"

void gpipe::nn::numberRandomStream(Operation *op, int64_t &next,
                                   Builder &builder) {
  if (auto dropout = dyn_cast<DropoutOp>(op);
      dropout && dropout.isRandom() && !dropout.getStreamAttr())
    dropout.setStreamAttr(builder.getI64IntegerAttr(next++));
  if (auto attention = dyn_cast<AttentionOp>(op);
      attention && attention.isRandom() && attention.getStream() < 0)
    attention.setStreamAttr(builder.getI64IntegerAttr(next++));
}
