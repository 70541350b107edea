//===- OpsNormalization.cpp - Importers of norms and softmax --------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// A scalar of `like`'s floating-point element type.
FailureOr<Value> scalar(GraphImporter &g, Type like, double value) {
  Type element = cast<RankedTensorType>(like).getElementType();
  std::optional<DType> dtype = dtypeOf(element);
  if (!dtype || !isFloatDType(*dtype))
    return g.error() << "needs a floating-point input, got " << element;
  return g.materialize(ConstTensor::ofFloats({value}, {}, *dtype));
}

struct Moments {
  Value mean;     // kept dims
  Value variance; // kept dims, biased (population) variance
};

/// Mean and variance of `x` over `axes`, with nn ops.
FailureOr<Moments> moments(GraphImporter &g, Value x, ArrayRef<int64_t> axes) {
  Builder &b = g.getBuilder();
  SmallVector<NamedAttribute> attrs{
      g.named("axes", b.getDenseI64ArrayAttr(axes)),
      g.named("keepdims", b.getBoolAttr(true))};
  auto mean = g.createValue<nn::ReduceMeanOp>({x}, attrs);
  if (failed(mean))
    return failure();
  auto centered = g.createValue<nn::SubOp>({x, *mean});
  if (failed(centered))
    return failure();
  auto squared = g.createValue<nn::MulOp>({*centered, *centered});
  if (failed(squared))
    return failure();
  auto variance = g.createValue<nn::ReduceMeanOp>({*squared}, attrs);
  if (failed(variance))
    return failure();
  return Moments{*mean, *variance};
}

/// The training-mode running statistics BatchNormalization outputs:
/// running = input * momentum + current * (1 - momentum), per channel.
LogicalResult importRunningStatistics(GraphImporter &g, Value x, Value mean,
                                      Value var, double momentum) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> axes{0};
  for (int64_t i = 2; i < type.getRank(); ++i)
    axes.push_back(i);
  auto stats = moments(g, x, axes);
  if (failed(stats))
    return failure();
  auto keep = g.getBuilder().getDenseI64ArrayAttr({type.getDimSize(1)});
  auto momentumValue = scalar(g, x.getType(), momentum);
  auto rest = scalar(g, x.getType(), 1.0 - momentum);
  if (failed(momentumValue) || failed(rest))
    return failure();
  Value current[2] = {stats->mean, stats->variance};
  Value running[2] = {mean, var};
  for (int k = 0; k < 2; ++k) {
    if (k + 1 >= g.getNode().output_size() || g.getNode().output(k + 1).empty())
      continue;
    auto flat =
        g.createValue<nn::ReshapeOp>({current[k]}, {g.named("shape", keep)});
    if (failed(flat))
      return failure();
    auto old = g.createValue<nn::MulOp>({running[k], *momentumValue});
    auto fresh = g.createValue<nn::MulOp>({*flat, *rest});
    if (failed(old) || failed(fresh))
      return failure();
    auto sum = g.createValue<nn::AddOp>({*old, *fresh});
    if (failed(sum))
      return failure();
    // Marks the update: inference compilation refuses graphs that use it.
    sum->getDefiningOp()->setAttr("gpipe.running_statistic",
                                  g.getBuilder().getUnitAttr());
    g.setOutput(k + 1, *sum);
  }
  return success();
}

LogicalResult importBatchNorm(GraphImporter &g) {
  bool hasTrainingMode = g.getOpset() >= 14;
  if (failed(g.checkAttrs(
          hasTrainingMode
              ? ArrayRef<StringRef>{"epsilon", "momentum", "training_mode"}
              : ArrayRef<StringRef>{"epsilon", "momentum"})))
    return failure();
  Builder &b = g.getBuilder();
  bool training = hasTrainingMode && g.intAttr("training_mode", 0) != 0;
  SmallVector<NamedAttribute> attrs{
      g.named("epsilon", b.getF32FloatAttr(g.floatAttr("epsilon", 1e-5f))),
      g.named("momentum", b.getF32FloatAttr(g.floatAttr("momentum", 0.9f))),
      g.named("training", b.getBoolAttr(training))};
  // Running statistics are state, not trainable parameters.
  g.markNonTrainable(3, "BatchNormalization running mean: updated by the op, "
                        "not trained");
  g.markNonTrainable(4, "BatchNormalization running variance: updated by the "
                        "op, not trained");
  auto operands = g.inputs(5);
  if (failed(operands))
    return failure();
  if (operands->size() != 5)
    return g.error() << "needs inputs X, scale, B, input_mean and input_var";
  auto result = g.createValue<nn::BatchNormOp>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  if (!training) {
    g.rejectOutputsFrom(1, "running statistics outside training mode");
    return success();
  }
  return importRunningStatistics(g, (*operands)[0], (*operands)[3],
                                 (*operands)[4], g.floatAttr("momentum", 0.9f));
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
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  Builder &b = g.getBuilder();
  SmallVector<NamedAttribute> attrs{
      g.named("axis", b.getI64IntegerAttr(axis)),
      g.named("epsilon", b.getF32FloatAttr(g.floatAttr("epsilon", 1e-5f)))};
  auto result = g.createValue<nn::LayerNormOp>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  bool wantsStatistics = false;
  for (int k = 1; k < g.getNode().output_size(); ++k)
    wantsStatistics |= !g.getNode().output(k).empty();
  if (!wantsStatistics)
    return success();
  // Mean and InvStdDev outputs: computed with nn ops.
  SmallVector<int64_t> axes;
  for (int64_t i = axis; i < rank; ++i)
    axes.push_back(i);
  Value x = (*operands)[0];
  auto stats = moments(g, x, axes);
  if (failed(stats))
    return failure();
  auto eps = scalar(g, x.getType(), g.floatAttr("epsilon", 1e-5f));
  auto one = scalar(g, x.getType(), 1.0);
  if (failed(eps) || failed(one))
    return failure();
  auto shifted = g.createValue<nn::AddOp>({stats->variance, *eps});
  if (failed(shifted))
    return failure();
  auto stddev = g.createValue<nn::SqrtOp>({*shifted});
  if (failed(stddev))
    return failure();
  auto inverse = g.createValue<nn::DivOp>({*one, *stddev});
  if (failed(inverse))
    return failure();
  g.setOutput(1, stats->mean);
  g.setOutput(2, *inverse);
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
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  Builder &b = g.getBuilder();
  if (!coerce2D || axis == rank - 1) {
    auto result =
        g.createValue<OpTy>({*x}, {g.named("axis", b.getI64IntegerAttr(axis))});
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
