//===- OpsLoss.cpp - Importers of the losses a model computes itself ------===//
//
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, which PyTorch
// exports for `F.cross_entropy` and `F.nll_loss` (opset 12 and later): a
// model that returns its own loss is compiled with `--loss=output:NAME`.
// Scores are [N, C] or [N, C, D1, ...] (the classes on axis 1), labels
// [N, D1, ...]. The common case, a mean, becomes one fused
// nn.softmax_cross_entropy over the rows (classes moved last); the others
// (sum, none, class weights, a loss on log-probabilities not computed by
// LogSoftmax) are built from nn ops that have VJPs: a one-hot mask picks
// each row's log-probability.
//
//===----------------------------------------------------------------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

#include <limits>
#include <numeric>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// A constant of `like`'s element type (which dtypeOf knows).
Value constantLike(GraphImporter &g, Type like, ArrayRef<double> values,
                   ArrayRef<int64_t> shape) {
  DType dtype = *dtypeOf(cast<RankedTensorType>(like).getElementType());
  if (isFloatDType(dtype))
    return g.materialize(ConstTensor::ofFloats(values, shape, dtype));
  SmallVector<int64_t> ints(values.begin(), values.end());
  return g.materialize(ConstTensor::ofInts(ints, shape, dtype));
}

FailureOr<Value> reduceSum(GraphImporter &g, Value x, int64_t axis) {
  Builder &b = g.getBuilder();
  return g.createValue<nn::ReduceSumOp>(
      {x}, {g.named("axes", b.getDenseI64ArrayAttr({axis})),
            g.named("keepdims", b.getBoolAttr(false))});
}

/// The checked operands of a loss node, with the classes moved last and
/// the rest folded into rows: `rows` is [R, C], `labels` [R].
struct LossOperands {
  Value scores;                  // as the node got them
  Value rows;                    // [R, C]
  Value labels;                  // [R]
  Value weights;                 // [C] class weights, or null
  SmallVector<int64_t> outShape; // the labels' shape: reduction 'none'
  std::string reduction;
  int64_t ignoreIndex;
  bool hasIgnoreIndex;
};

FailureOr<LossOperands> lossOperands(GraphImporter &g, StringRef pytorchName) {
  if (failed(g.checkAttrs({"ignore_index", "reduction"})))
    return failure();
  LossOperands l;
  l.reduction = g.stringAttr("reduction", "mean");
  l.hasIgnoreIndex = g.hasAttr("ignore_index");
  // Without the attribute no label is ignored; labels are in [0, C).
  l.ignoreIndex =
      g.intAttr("ignore_index", std::numeric_limits<int64_t>::min());
  if (g.failed())
    return failure();
  if (l.reduction != "mean" && l.reduction != "sum" && l.reduction != "none")
    return g.error() << "reduction '" << l.reduction
                     << "' is not one of mean, sum, none";
  auto scores = g.input(0);
  auto labels = g.input(1);
  if (failed(scores) || failed(labels))
    return failure();
  auto sType = cast<RankedTensorType>(scores->getType());
  auto lType = cast<RankedTensorType>(labels->getType());
  if (sType.getRank() < 2 || !isa<FloatType>(sType.getElementType()) ||
      !dtypeOf(sType.getElementType()))
    return g.error() << "scores must be a float tensor [N, C, ...], got "
                     << sType;
  if (!lType.getElementType().isInteger(64) &&
      !lType.getElementType().isInteger(32))
    return g.error() << "labels must be int64 or int32 class indices, got "
                     << lType;
  SmallVector<int64_t> expected{sType.getDimSize(0)};
  llvm::append_range(expected, sType.getShape().drop_front(2));
  if (lType.getShape() != ArrayRef<int64_t>(expected))
    return g.error() << "labels " << lType << " do not match the scores "
                     << sType
                     << ": expected one label per score row [N, D1, ...] "
                        "with the classes on axis 1";
  if (g.hasInput(2)) {
    auto weights = g.input(2);
    if (failed(weights))
      return failure();
    auto wType = cast<RankedTensorType>(weights->getType());
    if (wType.getRank() != 1 || wType.getDimSize(0) != sType.getDimSize(1) ||
        wType.getElementType() != sType.getElementType())
      return g.error() << "class weights (" << pytorchName
                       << "'s weight=) must be " << sType.getElementType()
                       << " [" << sType.getDimSize(1)
                       << "], one per class, got " << wType;
    l.weights = *weights;
  }
  l.scores = *scores;
  l.outShape.assign(expected.begin(), expected.end());
  int64_t classes = sType.getDimSize(1);
  int64_t rows = std::accumulate(expected.begin(), expected.end(), int64_t(1),
                                 std::multiplies<int64_t>());
  Value moved = *scores;
  if (sType.getRank() > 2) {
    SmallVector<int64_t> perm{0};
    for (int64_t i = 2; i < sType.getRank(); ++i)
      perm.push_back(i);
    perm.push_back(1);
    auto t = g.createValue<nn::TransposeOp>(
        {moved}, {g.named("perm", g.getBuilder().getDenseI64ArrayAttr(perm))});
    if (failed(t))
      return failure();
    moved = *t;
  }
  auto flatRows = reshapeTo(g, moved, {rows, classes});
  auto flatLabels = reshapeTo(g, *labels, {rows});
  if (failed(flatRows) || failed(flatLabels))
    return failure();
  l.rows = *flatRows;
  l.labels = *flatLabels;
  return l;
}

/// The loss from `logProbs` [R, C] by a one-hot mask: each row's
/// log-probability at its label, negated and times its class's weight;
/// ignored rows count nothing. A mean divides by the counted rows' weights.
LogicalResult importMaskedLoss(GraphImporter &g, const LossOperands &l,
                               Value logProbs) {
  auto type = cast<RankedTensorType>(logProbs.getType());
  int64_t rows = type.getDimSize(0), classes = type.getDimSize(1);
  Type labelType = l.labels.getType();
  SmallVector<double> range(classes);
  std::iota(range.begin(), range.end(), 0.0);
  auto column = reshapeTo(g, l.labels, {rows, 1});
  if (failed(column))
    return failure();
  auto onehot = g.createValue<nn::EqualOp>(
      {*column, constantLike(g, labelType, range, {classes})});
  if (failed(onehot))
    return failure();
  // Rows whose label is ignore_index: a mask [R] of the counted ones.
  Value counted;
  if (l.hasIgnoreIndex) {
    auto ignored = g.createValue<nn::EqualOp>(
        {l.labels, constantLike(g, labelType, {double(l.ignoreIndex)}, {})});
    if (failed(ignored))
      return failure();
    auto kept = g.createValue<nn::NotOp>({*ignored});
    if (failed(kept))
      return failure();
    counted = *kept;
    if (l.ignoreIndex >= 0 && l.ignoreIndex < classes) {
      auto keptColumn = reshapeTo(g, counted, {rows, 1});
      if (failed(keptColumn))
        return failure();
      onehot = g.createValue<nn::AndOp>({*onehot, *keptColumn});
      if (failed(onehot))
        return failure();
    }
  }
  Value zero = constantLike(g, logProbs.getType(), {0.0}, {});
  auto picked = g.createValue<nn::WhereOp>({*onehot, logProbs, zero});
  if (failed(picked))
    return failure();
  // The weight of each row's class (zero on ignored rows), summed: the
  // divisor of a weighted mean.
  Value weightSum;
  if (l.weights) {
    picked = g.createValue<nn::MulOp>({*picked, l.weights});
    auto rowWeights = g.createValue<nn::WhereOp>({*onehot, l.weights, zero});
    if (failed(picked) || failed(rowWeights))
      return failure();
    auto perRowWeight = reduceSum(g, *rowWeights, 1);
    if (failed(perRowWeight))
      return failure();
    auto total = reduceSum(g, *perRowWeight, 0);
    if (failed(total))
      return failure();
    weightSum = *total;
  }
  auto rowSum = reduceSum(g, *picked, 1);
  if (failed(rowSum))
    return failure();
  auto perRow = g.createValue<nn::NegOp>({*rowSum});
  if (failed(perRow))
    return failure();
  if (l.reduction == "none") {
    auto result = reshapeTo(g, *perRow, l.outShape);
    if (failed(result))
      return failure();
    g.setOutput(0, *result);
    return success();
  }
  auto total = reduceSum(g, *perRow, 0);
  if (failed(total))
    return failure();
  if (l.reduction == "sum") {
    g.setOutput(0, *total);
    return success();
  }
  Value count = constantLike(g, logProbs.getType(), {double(rows)}, {});
  if (weightSum) {
    count = weightSum;
  } else if (counted) {
    auto asFloat = g.createWithTypes(nn::CastOp::getOperationName(), {counted},
                                     {cast<RankedTensorType>(counted.getType())
                                          .clone(type.getElementType())},
                                     {});
    if (failed(asFloat))
      return failure();
    auto n = reduceSum(g, (*asFloat)->getResult(0), 0);
    if (failed(n))
      return failure();
    count = *n;
  }
  auto mean = g.createValue<nn::DivOp>({*total, count});
  if (failed(mean))
    return failure();
  g.setOutput(0, *mean);
  return success();
}

/// The fused mean: nn.softmax_cross_entropy over the rows.
LogicalResult importFusedMean(GraphImporter &g, const LossOperands &l,
                              Value logits) {
  auto loss = g.createValue<nn::SoftmaxCrossEntropyOp>(
      {logits, l.labels},
      {g.named("ignore_index",
               g.getBuilder().getI64IntegerAttr(l.ignoreIndex))});
  if (failed(loss))
    return failure();
  g.setOutput(0, *loss);
  return success();
}

LogicalResult importSoftmaxCrossEntropyLoss(GraphImporter &g) {
  auto l = lossOperands(g, "F.cross_entropy");
  if (failed(l))
    return failure();
  // The optional second output: the log-probabilities, classes on axis 1.
  if (g.getNode().output_size() > 1 && !g.getNode().output(1).empty()) {
    auto logProb = g.createValue<nn::LogSoftmaxOp>(
        {l->scores}, {g.named("axis", g.getBuilder().getI64IntegerAttr(1))});
    if (failed(logProb))
      return failure();
    g.setOutput(1, *logProb);
  }
  if (l->reduction == "mean" && !l->weights)
    return importFusedMean(g, *l, l->rows);
  auto logProbs = g.createValue<nn::LogSoftmaxOp>(
      {l->rows}, {g.named("axis", g.getBuilder().getI64IntegerAttr(1))});
  if (failed(logProbs))
    return failure();
  return importMaskedLoss(g, *l, *logProbs);
}

/// The logits whose log_softmax over the classes `rows` [R, C] is, looking
/// through reshapes that keep the classes last (F.nll_loss(F.log_softmax(
/// x, -1).view(-1, C), ...)); null when `rows` is not such a value.
Value logSoftmaxInput(GraphImporter &g, Value rows) {
  int64_t classes = cast<RankedTensorType>(rows.getType()).getDimSize(1);
  Value v = rows;
  while (auto r = v.getDefiningOp<nn::ReshapeOp>()) {
    auto in = cast<RankedTensorType>(r.getInput().getType());
    if (in.getRank() == 0 || in.getShape().back() != classes)
      return nullptr;
    v = r.getInput();
  }
  auto ls = v.getDefiningOp<nn::LogSoftmaxOp>();
  if (!ls)
    return nullptr;
  auto in = cast<RankedTensorType>(ls.getInput().getType());
  int64_t axis = static_cast<int64_t>(ls.getAxis()); // I64Attr: unsigned
  if (axis < 0)
    axis += in.getRank();
  if (axis != in.getRank() - 1)
    return nullptr;
  auto flat =
      reshapeTo(g, ls.getInput(), {in.getNumElements() / classes, classes});
  return failed(flat) ? nullptr : *flat;
}

LogicalResult importNegativeLogLikelihoodLoss(GraphImporter &g) {
  auto l = lossOperands(g, "F.nll_loss");
  if (failed(l))
    return failure();
  if (l->reduction == "mean" && !l->weights)
    if (Value logits = logSoftmaxInput(g, l->rows))
      return importFusedMean(g, *l, logits);
  if (g.failed())
    return failure();
  return importMaskedLoss(g, *l, l->rows);
}

} // namespace

void gpipe::onnx_import::registerLossImporters(OpImporterTable &t) {
  t.add("SoftmaxCrossEntropyLoss", 12, importSoftmaxCrossEntropyLoss);
  t.add("NegativeLogLikelihoodLoss", 12, importNegativeLogLikelihoodLoss);
}
