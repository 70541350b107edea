//===- OpsNormalization.cpp - Importers of norms and softmax --------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

LogicalResult importBatchNorm(GraphImporter &g) {
  bool hasTrainingMode = g.getOpset() >= 14;
  if (failed(g.checkAttrs(hasTrainingMode
                              ? ArrayRef<StringRef>{"epsilon", "momentum",
                                                    "training_mode"}
                              : ArrayRef<StringRef>{"epsilon", "momentum"})))
    return failure();
  Builder &b = g.getBuilder();
  bool training = hasTrainingMode && g.intAttr("training_mode", 0) != 0;
  SmallVector<NamedAttribute> attrs{
      g.named("epsilon", b.getF32FloatAttr(g.floatAttr("epsilon", 1e-5f))),
      g.named("momentum", b.getF32FloatAttr(g.floatAttr("momentum", 0.9f))),
      g.named("training", b.getBoolAttr(training))};
  // Running statistics are state, not trainable parameters.
  g.markNonTrainable(3);
  g.markNonTrainable(4);
  auto operands = g.inputs(5);
  if (failed(operands))
    return failure();
  if (operands->size() != 5)
    return g.error() << "needs inputs X, scale, B, input_mean and input_var";
  g.rejectOutputsFrom(1, "running statistics as a tensor");
  auto result = g.createValue<nn::BatchNormOp>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importLayerNorm(GraphImporter &g) {
  if (failed(g.checkAttrs({"axis", "epsilon", "stash_type"})))
    return failure();
  if (g.intAttr("stash_type", 1) != 1)
    return g.error() << "only stash_type=1 (float) is supported";
  auto operands = g.inputs(3);
  if (failed(operands))
    return failure();
  if (operands->size() < 2)
    return g.error() << "needs inputs X and Scale";
  int64_t rank = cast<RankedTensorType>(operands->front().getType()).getRank();
  int64_t axis = g.intAttr("axis", -1);
  if (axis < -rank || axis >= rank)
    return g.error() << "axis " << axis << " is out of range for rank "
                     << rank;
  if (axis < 0)
    axis += rank;
  Builder &b = g.getBuilder();
  SmallVector<NamedAttribute> attrs{
      g.named("axis", b.getI64IntegerAttr(axis)),
      g.named("epsilon", b.getF32FloatAttr(g.floatAttr("epsilon", 1e-5f)))};
  g.rejectOutputsFrom(1, "mean and inverse standard deviation");
  auto result = g.createValue<nn::LayerNormOp>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// Softmax and LogSoftmax. Before opset 13 the input is coerced to 2-D at
/// `axis` (default 1) and normalized over the flattened trailing axes.
template <typename OpTy> LogicalResult importSoftmax(GraphImporter &g) {
  if (failed(g.checkAttrs({"axis"})))
    return failure();
  bool coerce2D = g.getOpset() < 13;
  int64_t axis = g.intAttr("axis", coerce2D ? 1 : -1);
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  int64_t rank = type.getRank();
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return g.error() << "axis " << axis << " is out of range for rank "
                     << rank;
  if (axis < 0)
    axis += rank;
  Builder &b = g.getBuilder();
  if (!coerce2D || axis == rank - 1) {
    auto result = g.createValue<OpTy>(
        {*x}, {g.named("axis", b.getI64IntegerAttr(axis))});
    if (failed(result))
      return failure();
    g.setOutput(0, *result);
    return success();
  }
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= type.getDimSize(i);
  auto flat = g.createValue<nn::ReshapeOp>(
      {*x}, {g.named("shape", b.getDenseI64ArrayAttr({outer, inner}))});
  if (failed(flat))
    return failure();
  auto normalized =
      g.createValue<OpTy>({*flat}, {g.named("axis", b.getI64IntegerAttr(1))});
  if (failed(normalized))
    return failure();
  auto result = g.createValue<nn::ReshapeOp>(
      {*normalized},
      {g.named("shape", b.getDenseI64ArrayAttr(type.getShape()))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

} // namespace

void gpipe::onnx_import::registerNormalizationImporters(OpImporterTable &t) {
  t.add("BatchNormalization", 9, importBatchNorm);
  t.add("LayerNormalization", 17, importLayerNorm);
  t.add("Softmax", 1, importSoftmax<nn::SoftmaxOp>);
  t.add("LogSoftmax", 1, importSoftmax<nn::LogSoftmaxOp>);
}
