//===- OpsLinear.cpp - Importers of Gemm, MatMul and Conv -----------------===//
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

} // namespace

void gpipe::onnx_import::registerLinearImporters(OpImporterTable &t) {
  t.add("Gemm", 7, importGemm);
  t.add("MatMul", 1, importMatMul);
  t.add("Conv", 1, importConv);
}
