//===- OpsLinear.cpp - Importers of Gemm, MatMul, Conv, ConvTranspose ----===//
#include "GraphImporter.h"
#include "OpImporterTable.h"
#include "Windowing.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

LogicalResult importGemm(GraphImporter &g) {
  if (failed(g.checkAttrs({"alpha", "beta", "transA", "transB"})))
    return failure();
  Builder &b = g.getBuilder();
  SmallVector<NamedAttribute> attrs{
      g.named("alpha", b.getF32FloatAttr(g.floatAttr("alpha", 1.0f))),
      g.named("beta", b.getF32FloatAttr(g.floatAttr("beta", 1.0f))),
      g.named("trans_a", b.getBoolAttr(g.intAttr("transA", 0) != 0)),
      g.named("trans_b", b.getBoolAttr(g.intAttr("transB", 0) != 0))};
  auto operands = g.inputs(3);
  if (failed(operands))
    return failure();
  if (operands->size() < 2)
    return g.error() << "needs inputs A and B";
  auto result = g.createValue<nn::GemmOp>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importMatMul(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  auto operands = g.inputs(2);
  if (failed(operands))
    return failure();
  if (operands->size() != 2)
    return g.error() << "needs two inputs";
  auto result = g.createValue<nn::MatMulOp>(*operands);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importConv(GraphImporter &g) {
  if (failed(g.checkAttrs({"auto_pad", "dilations", "group", "kernel_shape",
                           "pads", "strides"})))
    return failure();
  auto inputType = g.inputType(0);
  auto weightType = g.inputType(1);
  if (failed(inputType) || failed(weightType))
    return failure();
  if (weightType->getRank() != inputType->getRank())
    return g.error() << "weight " << *weightType << " and input " << *inputType
                     << " must have the same rank";
  auto window = readWindow(g, *inputType, weightType->getShape().drop_front(2));
  if (failed(window))
    return failure();
  Builder &b = g.getBuilder();
  SmallVector<NamedAttribute> attrs{
      g.named("strides", b.getDenseI64ArrayAttr(window->strides)),
      g.named("pads", b.getDenseI64ArrayAttr(window->pads)),
      g.named("dilations", b.getDenseI64ArrayAttr(window->dilations)),
      g.named("group", b.getI64IntegerAttr(g.intAttr("group", 1)))};
  auto operands = g.inputs(3);
  if (failed(operands))
    return failure();
  auto result = g.createValue<nn::ConvOp>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// ConvTranspose: the input gradient of the convolution that maps the
/// output's shape to the input's (nn.conv_grad_input, whose weight layout
/// [C, M / group, k...] is ONNX's), then the bias per output channel.
/// Output size per spatial axis: output_shape when given (pads then follow
/// from it), else stride (in - 1) + output_padding + (k - 1) dilation + 1
/// - pads; auto_pad SAME_* asks for in * stride.
LogicalResult importConvTranspose(GraphImporter &g) {
  if (failed(
          g.checkAttrs({"auto_pad", "dilations", "group", "kernel_shape",
                        "output_padding", "output_shape", "pads", "strides"})))
    return failure();
  auto inputType = g.inputType(0);
  auto weightType = g.inputType(1);
  if (failed(inputType) || failed(weightType))
    return failure();
  int64_t rank = inputType->getRank();
  if (rank < 3 || weightType->getRank() != rank)
    return g.error() << "input " << *inputType << " and weight " << *weightType
                     << " must have the same rank, at least 3 (N, C, "
                        "spatial...)";
  int64_t spatial = rank - 2, group = g.intAttr("group", 1);
  ArrayRef<int64_t> in = inputType->getShape(), w = weightType->getShape();
  if (group < 1 || in[1] != w[0] || in[1] % group != 0)
    return g.error() << "weight " << *weightType << " does not match input "
                     << *inputType << " in " << group
                     << " group(s): its first dimension must be the input "
                        "channels";
  auto window = readWindowAttrs(g, spatial, w.drop_front(2));
  if (failed(window))
    return failure();
  SmallVector<int64_t> &kernel = window->kernel, &strides = window->strides,
                       &dilations = window->dilations, &pads = window->pads;
  const std::string &autoPad = window->autoPad;
  SmallVector<int64_t> outputPadding(spatial, 0);
  if (std::optional<SmallVector<int64_t>> v = g.intsAttr("output_padding")) {
    if (static_cast<int64_t>(v->size()) != spatial)
      return g.error() << "'output_padding' has " << v->size()
                       << " entries, expected " << spatial;
    outputPadding = *v;
  }
  std::optional<SmallVector<int64_t>> outputShape = g.intsAttr("output_shape");
  if (outputShape && static_cast<int64_t>(outputShape->size()) != spatial &&
      static_cast<int64_t>(outputShape->size()) != rank)
    return g.error() << "output_shape has " << outputShape->size()
                     << " entries, expected " << spatial << " (or " << rank
                     << ")";
  if (autoPad == "VALID")
    pads.assign(2 * spatial, 0);
  SmallVector<int64_t> resultShape{in[0], w[1] * group};
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t s = strides[i], d = dilations[i], op = outputPadding[i];
    if (op < 0 || op >= s)
      return g.error() << "output_padding must be below the stride (spatial "
                          "axis "
                       << i << ")";
    int64_t full = s * (in[i + 2] - 1) + op + (kernel[i] - 1) * d + 1;
    std::optional<int64_t> wanted;
    if (outputShape)
      wanted = (*outputShape)[outputShape->size() - spatial + i];
    else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER")
      wanted = in[i + 2] * s;
    int64_t size;
    if (wanted) {
      // ONNX's split of the total padding (floor halves): a negative end
      // is output padding (rows no window reaches), a negative start
      // would shift the output.
      int64_t total = full - *wanted;
      int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      bool upper = autoPad == "SAME_UPPER";
      int64_t begin = upper ? half : total - half;
      int64_t end = upper ? total - half : half;
      if (begin < 0)
        return g.error() << "output size " << *wanted << " on spatial axis "
                         << i << " needs a negative begin padding: not "
                         << "implemented yet";
      pads[i] = begin;
      pads[i + spatial] = std::max<int64_t>(end, 0);
      size = *wanted;
    } else {
      size = full - pads[i] - pads[i + spatial];
    }
    int64_t window = (kernel[i] - 1) * d + 1;
    int64_t span = size + pads[i] + pads[i + spatial] - window;
    if (size < 1 || span < 0 || span / s + 1 != in[i + 2])
      return g.error() << "output size " << size << " on spatial axis " << i
                       << " does not follow from input size " << in[i + 2]
                       << ", kernel " << kernel[i] << ", stride " << s
                       << " and pads " << pads[i] << ", " << pads[i + spatial];
    resultShape.push_back(size);
  }
  auto operands = g.inputs(3);
  if (failed(operands))
    return failure();
  if (operands->size() < 2)
    return g.error() << "needs inputs X and W";
  Builder &b = g.getBuilder();
  SmallVector<NamedAttribute> attrs{
      g.named("strides", b.getDenseI64ArrayAttr(strides)),
      g.named("pads", b.getDenseI64ArrayAttr(pads)),
      g.named("dilations", b.getDenseI64ArrayAttr(dilations)),
      g.named("group", b.getI64IntegerAttr(group))};
  auto op = g.createWithTypes(
      nn::ConvGradInputOp::getOperationName(), {(*operands)[0], (*operands)[1]},
      {RankedTensorType::get(resultShape, inputType->getElementType())}, attrs);
  if (failed(op))
    return failure();
  Value result = (*op)->getResult(0);
  if (operands->size() == 3) {
    Value bias = (*operands)[2];
    auto biasType = cast<RankedTensorType>(bias.getType());
    if (biasType.getRank() != 1 || biasType.getDimSize(0) != resultShape[1])
      return g.error() << "bias " << biasType << " must hold one value per "
                       << "output channel (" << resultShape[1] << ")";
    SmallVector<int64_t> perChannel(rank - 1, 1);
    perChannel[0] = resultShape[1];
    auto shaped = reshapeTo(g, bias, perChannel);
    if (failed(shaped))
      return failure();
    auto sum = g.createValue<nn::AddOp>({result, *shaped});
    if (failed(sum))
      return failure();
    result = *sum;
  }
  g.setOutput(0, result);
  return success();
}

} // namespace

void gpipe::onnx_import::registerLinearImporters(OpImporterTable &t) {
  t.add("Gemm", 7, importGemm);
  t.add("MatMul", 1, importMatMul);
  t.add("Conv", 1, importConv);
  t.add("ConvTranspose", 1, importConvTranspose);
}
