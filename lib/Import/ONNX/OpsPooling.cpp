//===- OpsPooling.cpp - Importers of pooling ops --------------------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"
#include "Windowing.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

LogicalResult importMaxPool(GraphImporter &g) {
  if (failed(g.checkAttrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape",
                           "pads", "storage_order", "strides"})))
    return failure();
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto window =
      readWindow(g, cast<RankedTensorType>(x->getType()), std::nullopt);
  if (failed(window))
    return failure();
  Builder &b = g.getBuilder();
  g.rejectOutputsFrom(1, "the argmax indices");
  auto result = g.createValue<nn::MaxPoolOp>(
      {*x},
      {g.named("kernel_shape", b.getDenseI64ArrayAttr(window->kernel)),
       g.named("strides", b.getDenseI64ArrayAttr(window->strides)),
       g.named("pads", b.getDenseI64ArrayAttr(window->pads)),
       g.named("dilations", b.getDenseI64ArrayAttr(window->dilations)),
       g.named("ceil_mode", b.getBoolAttr(g.intAttr("ceil_mode", 0) != 0))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importAveragePool(GraphImporter &g) {
  if (failed(g.checkAttrs({"auto_pad", "ceil_mode", "count_include_pad",
                           "kernel_shape", "pads", "strides"})))
    return failure();
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto window =
      readWindow(g, cast<RankedTensorType>(x->getType()), std::nullopt);
  if (failed(window))
    return failure();
  Builder &b = g.getBuilder();
  auto result = g.createValue<nn::AvgPoolOp>(
      {*x},
      {g.named("kernel_shape", b.getDenseI64ArrayAttr(window->kernel)),
       g.named("strides", b.getDenseI64ArrayAttr(window->strides)),
       g.named("pads", b.getDenseI64ArrayAttr(window->pads)),
       g.named("ceil_mode", b.getBoolAttr(g.intAttr("ceil_mode", 0) != 0)),
       g.named("count_include_pad",
               b.getBoolAttr(g.intAttr("count_include_pad", 0) != 0))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importGlobalAveragePool(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto result = g.createValue<nn::GlobalAvgPoolOp>({*x});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

} // namespace

void gpipe::onnx_import::registerPoolingImporters(OpImporterTable &t) {
  t.add("MaxPool", 1, importMaxPool);
  t.add("AveragePool", 1, importAveragePool);
  t.add("GlobalAveragePool", 1, importGlobalAveragePool);
}
