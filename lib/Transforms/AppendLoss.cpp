//===- AppendLoss.cpp - The training loss at the end of @forward ----------===//
#include "Transforms/Passes.h"

#include "Analysis/BatchPlacement.h"
#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

namespace gpipe {
#define GEN_PASS_DEF_APPENDLOSS
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using gpipe::BatchPlacement;

namespace {

struct AppendLossPass : public gpipe::impl::AppendLossBase<AppendLossPass> {
  using AppendLossBase::AppendLossBase;

  void runOnOperation() override {
    auto forward = getOperation().lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      getOperation().emitError("no @forward function");
      return signalPassFailure();
    }
    LogicalResult result = failure();
    if (StringRef(loss).starts_with("output:"))
      result = useOutput(forward, StringRef(loss).drop_front(7));
    else if (loss == "cross-entropy")
      result = appendCrossEntropy(forward);
    else if (loss == "mse")
      result = appendMeanSquaredError(forward);
    else
      forward.emitError("--loss=")
          << loss << " is not a loss: use cross-entropy, mse or output:NAME";
    if (failed(result))
      signalPassFailure();
  }

  LogicalResult appendCrossEntropy(func::FuncOp forward) {
    auto ret = cast<func::ReturnOp>(forward.front().getTerminator());
    if (ret.getNumOperands() != 1)
      return forward.emitError("--loss=cross-entropy needs a model with one "
                               "output (the logits), this one has ")
             << ret.getNumOperands();
    auto logits = dyn_cast<RankedTensorType>(ret.getOperand(0).getType());
    if (!logits || logits.getRank() < 2 ||
        !isa<FloatType>(logits.getElementType()))
      return forward.emitError("--loss=cross-entropy needs float logits with "
                               "the classes on the last axis ([N, C] or "
                               "[B, T, V]), the model returns ")
             << ret.getOperand(0).getType();
    int64_t rank = logits.getRank();
    int64_t axis = classAxis < 0 ? classAxis + rank : classAxis;
    if (axis < 1 || axis >= rank)
      return forward.emitError("--class-axis=")
             << static_cast<int64_t>(classAxis)
             << " is not an axis of the logits " << ret.getOperand(0).getType()
             << " after the batch (1 to rank - 1, or -1 for the last)";
    OpBuilder b(ret);
    Location loc = lossLocation(ret);
    // Labels: one class index per position of the logits but the class
    // axis (a [B, T] sequence of tokens for [B, T, V] logits, a [N, H, W]
    // map for [N, C, H, W]).
    SmallVector<int64_t> rowShape(logits.getShape());
    rowShape.erase(rowShape.begin() + axis);
    // Where the batch is among the positions (the class axis left out).
    auto [batch, placed] = outputBatch(forward, 0);
    if (placed && placed->axis == axis)
      placed.reset();
    else if (placed && placed->axis > axis)
      --placed->axis;
    Value rows = ret.getOperand(0);
    FailureOr<Value> appended = appendLabels(
        forward, b, loc, rowShape, b.getIntegerType(64), batch, placed);
    if (failed(appended))
      return failure();
    Value labels = *appended;
    if (axis != rank - 1) {
      // The classes last, in the labels' order of positions.
      SmallVector<int64_t> perm;
      for (int64_t i = 0; i < rank; ++i)
        if (i != axis)
          perm.push_back(i);
      perm.push_back(axis);
      rows = b.create<gpipe::nn::TransposeOp>(
          loc, ValueRange{rows},
          ArrayRef<NamedAttribute>{
              b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))});
    }
    if (logits.getRank() > 2) {
      int64_t n = cast<RankedTensorType>(labels.getType()).getNumElements();
      auto reshape = [&](Value v, ArrayRef<int64_t> shape) -> Value {
        return b.create<gpipe::nn::ReshapeOp>(
            loc, ValueRange{v},
            ArrayRef<NamedAttribute>{
                b.getNamedAttr("shape", b.getDenseI64ArrayAttr(shape))});
      };
      rows = reshape(rows, {n, logits.getDimSize(axis)});
      labels = reshape(labels, {n});
    }
    Value lossValue = b.create<gpipe::nn::SoftmaxCrossEntropyOp>(
        loc, ValueRange{rows, labels},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("ignore_index", b.getI64IntegerAttr(ignoreIndex))});
    return setResults(forward, ret, {lossValue, ret.getOperand(0)},
                      {"loss", resultName(forward, 0)});
  }

  /// mean((output - labels)^2) over every element; labels have the
  /// output's type.
  LogicalResult appendMeanSquaredError(func::FuncOp forward) {
    auto ret = cast<func::ReturnOp>(forward.front().getTerminator());
    if (ret.getNumOperands() != 1)
      return forward.emitError("--loss=mse needs a model with one output, "
                               "this one has ")
             << ret.getNumOperands();
    Value out = ret.getOperand(0);
    auto type = dyn_cast<RankedTensorType>(out.getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      return forward.emitError("--loss=mse needs a float output, got ")
             << out.getType();
    OpBuilder b(ret);
    Location loc = lossLocation(ret);
    auto [batch, placed] = outputBatch(forward, 0);
    FailureOr<Value> labels = appendLabels(
        forward, b, loc, type.getShape(), type.getElementType(), batch, placed);
    if (failed(labels))
      return failure();
    Value diff = b.create<gpipe::nn::SubOp>(loc, ValueRange{out, *labels},
                                            ArrayRef<NamedAttribute>{});
    Value square = b.create<gpipe::nn::MulOp>(loc, ValueRange{diff, diff},
                                              ArrayRef<NamedAttribute>{});
    SmallVector<int64_t> axes;
    for (int64_t i = 0; i < type.getRank(); ++i)
      axes.push_back(i);
    Value mean = b.create<gpipe::nn::ReduceMeanOp>(
        loc, ValueRange{square},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
            b.getNamedAttr("keepdims", b.getBoolAttr(false))});
    return setResults(forward, ret, {mean, out},
                      {"loss", resultName(forward, 0)});
  }

  /// The batch (the rows of @forward's first ranked argument: arguments
  /// hold it on axis 0) and where output `i` carries it.
  static std::pair<int64_t, std::optional<BatchPlacement>>
  outputBatch(func::FuncOp forward, unsigned i) {
    for (Type t : forward.getArgumentTypes())
      if (auto ranked = dyn_cast<RankedTensorType>(t);
          ranked && ranked.getRank() > 0) {
        int64_t batch = ranked.getDimSize(0);
        return {batch, gpipe::resultBatchPlacements(forward, batch)[i]};
      }
    return {0, std::nullopt};
  }

  /// Appends the `labels` argument and returns it as a tensor of `shape`
  /// (the positions of the output they label). Labels are a data input: the
  /// phases take it batch-first, [b, ...] with each sample's labels in the
  /// order of its positions. Where the output holds the batch elsewhere
  /// (`placed`: [T, b, V] logits of a sequence-first model, [T * b, V] of
  /// its view) they are moved to the output's order, and the arrays a user
  /// gives hold their samples on that axis ([T, N]: the module's
  /// gpipe.data_batch_axes).
  static FailureOr<Value> appendLabels(func::FuncOp forward, OpBuilder &b,
                                       Location loc, ArrayRef<int64_t> shape,
                                       Type elementType, int64_t batch,
                                       std::optional<BatchPlacement> placed) {
    unsigned index = forward.getNumArguments();
    auto addArgument = [&](ArrayRef<int64_t> argShape) {
      forward.insertArgument(
          index, RankedTensorType::get(argShape, elementType),
          gpipe::slotAttrs(b.getContext(), "labels", gpipe::Role::Data),
          forward.getLoc());
      return forward.getArgument(index);
    };
    ModuleOp module = forward->getParentOfType<ModuleOp>();
    auto given =
        module->getAttrOfType<DictionaryAttr>(gpipe::kDataBatchAxesAttrName);
    int64_t dim = placed ? shape[placed->axis] : 0;
    if (!placed || batch <= 0 || dim % (batch * placed->inner) != 0) {
      // Labels batch-first like the output's rows: right only where the
      // inputs are batch-first too.
      if (given && !given.empty()) {
        forward.emitError("cannot tell where the output ")
            << RankedTensorType::get(shape, elementType)
            << " holds the batch of the sequence-first inputs, so the "
               "labels cannot be laid out like it: return the output with "
               "the batch on an axis of its own";
        return failure();
      }
      return addArgument(shape);
    }
    if (placed->axis == 0 && dim == batch * placed->inner)
      return addArgument(shape); // batch-first already
    // The output's positions with the batch's dimension split into
    // (outer, batch, inner), the batch at `at`.
    int64_t outer = dim / (batch * placed->inner);
    SmallVector<int64_t> split(shape.begin(), shape.begin() + placed->axis);
    if (outer > 1)
      split.push_back(outer);
    int64_t at = static_cast<int64_t>(split.size());
    split.push_back(batch);
    if (placed->inner > 1)
      split.push_back(placed->inner);
    split.append(shape.begin() + placed->axis + 1, shape.end());
    SmallVector<int64_t> argShape(split);
    argShape.erase(argShape.begin() + at);
    argShape.insert(argShape.begin(), batch);
    Value labels = addArgument(argShape);
    SmallVector<int64_t> perm =
        gpipe::batchToAxisPermutation(static_cast<int64_t>(split.size()), at);
    labels = b.create<gpipe::nn::TransposeOp>(
        loc, ValueRange{labels},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))});
    if (split.size() != shape.size())
      labels = b.create<gpipe::nn::ReshapeOp>(
          loc, ValueRange{labels},
          ArrayRef<NamedAttribute>{
              b.getNamedAttr("shape", b.getDenseI64ArrayAttr(shape))});
    NamedAttrList axes;
    if (given)
      axes.append(given.getValue());
    axes.set("labels", b.getI64IntegerAttr(at));
    module->setAttr(gpipe::kDataBatchAxesAttrName,
                    axes.getDictionary(b.getContext()));
    return labels;
  }

  LogicalResult useOutput(func::FuncOp forward, StringRef name) {
    auto ret = cast<func::ReturnOp>(forward.front().getTerminator());
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      if (resultName(forward, i) != name)
        continue;
      auto type = cast<RankedTensorType>(ret.getOperand(i).getType());
      if (type.getNumElements() != 1 || !isa<FloatType>(type.getElementType()))
        return forward.emitError("--loss=output:")
               << name << " needs a scalar float output, got " << type;
      SmallVector<Value> values{ret.getOperand(i)};
      SmallVector<std::string> names{name.str()};
      for (unsigned j = 0; j < ret.getNumOperands(); ++j)
        if (j != i) {
          values.push_back(ret.getOperand(j));
          names.push_back(resultName(forward, j));
        }
      return setResults(forward, ret, values, names);
    }
    return forward.emitError("--loss=output:")
           << name << ": the model has no output of that name";
  }

  /// The appended loss's ops are named "(loss)" (no ONNX node's name):
  /// their kernels and their gradients' are timed and priced as one op
  /// (gpipe-run --profile-ops, --cost-table).
  static Location lossLocation(func::ReturnOp ret) {
    return NameLoc::get(StringAttr::get(ret.getContext(), "(loss)"),
                        ret.getLoc());
  }

  static std::string resultName(func::FuncOp f, unsigned i) {
    auto name = f.getResultAttrOfType<StringAttr>(i, "gpipe.name");
    return name ? name.str() : "output" + std::to_string(i);
  }

  LogicalResult setResults(func::FuncOp forward, func::ReturnOp ret,
                           ArrayRef<Value> values,
                           ArrayRef<std::string> names) {
    OpBuilder b(ret);
    b.create<func::ReturnOp>(ret.getLoc(), values);
    ret.erase();
    SmallVector<Type> types;
    for (Value v : values)
      types.push_back(v.getType());
    forward.setType(b.getFunctionType(forward.getArgumentTypes(), types));
    // The loss first, then the model's outputs.
    for (auto [i, n] : llvm::enumerate(names))
      forward.setResultAttrs(i, gpipe::slotAttrs(b.getContext(), n,
                                                 i == 0 ? gpipe::Role::Loss
                                                        : gpipe::Role::Output));
    return success();
  }
};

} // namespace
