//===- OpsShape.cpp - Importers of shape and data-movement ops ------------===//
//
// Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Slice, Split,
// Gather, Pad, Tile, ReduceMean, ReduceSum and CumSum. Shape arguments must be
// known at compile time; on constant data the ops are folded (that is how
// Shape -> Gather -> Concat -> Reshape chains of exporters disappear).
//
//===----------------------------------------------------------------------===//
#include "Analysis/BatchPlacement.h"
#include "ConstFolding.h"
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

#include <set>
#include <type_traits>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// Normalizes axes into [0, rank); duplicates and out-of-range are errors.
FailureOr<SmallVector<int64_t>>
normalizeAxes(GraphImporter &g, ArrayRef<int64_t> axes, int64_t rank) {
  SmallVector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return g.error() << "axis " << a << " is out of range for rank " << rank;
    int64_t n = a < 0 ? a + rank : a;
    if (!seen.insert(n).second)
      return g.error() << "axis " << a << " appears twice";
    out.push_back(n);
  }
  return out;
}

/// Output 0 is input 0 with a new shape (same element count): folded when
/// the input is constant, else nn.reshape.
LogicalResult reshapeTo(GraphImporter &g, ArrayRef<int64_t> shape) {
  if (const ConstTensor *c = g.constantInput(0)) {
    int64_t count = 1;
    for (int64_t d : shape) {
      if (d && count > (int64_t(1) << 40) / d)
        return g.error() << "the target shape has more than 2^40 elements";
      count *= d;
    }
    if (count != c->numElements())
      return g.error() << "cannot reshape " << c->numElements()
                       << " elements to " << count;
    ConstTensor out = *c;
    out.shape.assign(shape.begin(), shape.end());
    g.setConstantOutput(0, std::move(out));
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto result = g.createValue<nn::ReshapeOp>(
      {*x}, {g.named("shape", g.getBuilder().getDenseI64ArrayAttr(shape))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// Input `i`: a 1-D integer vector known at compile time (`what` names it
/// in errors), e.g. a target shape.
FailureOr<std::vector<int64_t>> requireShapeVector(GraphImporter &g, size_t i,
                                                   StringRef what) {
  auto t = g.requireConstant(i, what);
  if (failed(t))
    return failure();
  if ((*t)->shape.size() != 1) {
    g.error() << what << " must be 1-D";
    return failure();
  }
  return (*t)->toInts();
}

/// Expand: the input broadcast (NumPy rules, both ways) with the constant
/// target shape; an nn.broadcast, or the input itself when nothing grows.
LogicalResult importExpand(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  auto target = requireShapeVector(g, 1, "the target shape");
  if (failed(target))
    return failure();
  const std::vector<int64_t> &requested = *target;
  // A constant of a static-batch export expanded to a shape read at the
  // compiled batch (nn.GRU's zero initial state, [layers, B, hidden])
  // takes that batch.
  int64_t exported = g.getExportBatch(), compiled = g.getCompiledBatch();
  if (exported > 0 && compiled > 0 && g.constantInput(0)) {
    ArrayRef<int64_t> dims = type->getShape();
    for (size_t d = 0; d < dims.size(); ++d) {
      size_t fromEnd = dims.size() - d;
      if (fromEnd > requested.size())
        continue;
      int64_t a = dims[d], b = requested[requested.size() - fromEnd];
      if (a != b && a % exported == 0 && a / exported * compiled == b) {
        if (failed(g.rebatchConstantInput(0, static_cast<int64_t>(d),
                                          a / exported)))
          return failure();
        type = g.inputType(0);
        if (failed(type))
          return failure();
        break;
      }
    }
  }
  ArrayRef<int64_t> in = type->getShape();
  size_t rank = std::max(in.size(), requested.size());
  SmallVector<int64_t> shape(rank);
  int64_t count = 1;
  for (size_t i = 0; i < rank; ++i) {
    int64_t a = i + in.size() >= rank ? in[i + in.size() - rank] : 1;
    int64_t b = i + requested.size() >= rank
                    ? requested[i + requested.size() - rank]
                    : 1;
    if (b < 0)
      return g.error() << "invalid shape entry " << b;
    if (a != b && a != 1 && b != 1)
      return g.error() << "cannot expand dimension " << i << " of size " << a
                       << " to " << b;
    shape[i] = a == 1 ? b : a;
    if (shape[i] && count > (int64_t(1) << 40) / shape[i])
      return g.error() << "the expanded shape has more than 2^40 elements";
    count *= shape[i];
  }
  // A constant expanded (a mask built from static shapes) stays one.
  if (const ConstTensor *c = g.constantInput(0);
      c && count <= kMaxFoldedElements) {
    g.setConstantOutput(0, foldExpand(*c, shape));
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  if (ArrayRef<int64_t>(shape) == in) {
    g.setOutput(0, *x);
    return success();
  }
  auto result = g.createValue<nn::BroadcastOp>(
      {*x}, {g.named("shape", g.getBuilder().getDenseI64ArrayAttr(shape))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// Tile: the input repeated `repeats[i]` times along each axis i; the
/// repeats must be known at compile time. Folded on constants; otherwise
/// the input gets a unit axis before each repeated one, is broadcast along
/// those and reshaped back, so that the gradient is the broadcast's (a sum
/// over the copies).
LogicalResult importTile(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  auto type = g.inputType(0);
  auto reps = requireShapeVector(g, 1, "repeats");
  if (failed(type) || failed(reps))
    return failure();
  ArrayRef<int64_t> in = type->getShape();
  if (reps->size() != in.size())
    return g.error() << "repeats has " << reps->size()
                     << " entries for an input of rank " << in.size();
  SmallVector<int64_t> unit, expanded, out;
  for (auto [d, r] : llvm::zip_equal(in, *reps)) {
    if (r < 1)
      return g.error() << "repeats must be positive, got " << r;
    if (r != 1) {
      unit.push_back(1);
      expanded.push_back(r);
    }
    unit.push_back(d);
    expanded.push_back(d);
    out.push_back(d * r);
  }
  if (out == in) {
    auto x = g.input(0);
    if (failed(x))
      return failure();
    g.setOutput(0, *x);
    return success();
  }
  if (const ConstTensor *c = g.constantInput(0)) {
    ConstTensor result;
    result.dtype = c->dtype;
    result.shape.assign(out.begin(), out.end());
    int64_t n = result.numElements();
    std::vector<int64_t> index(n);
    for (int64_t i = 0; i < n; ++i) {
      // Row-major position in the output -> the input element it copies.
      int64_t rest = i, source = 0, stride = 1;
      for (int64_t a = int64_t(in.size()) - 1; a >= 0; --a) {
        source += (rest % out[a]) % in[a] * stride;
        rest /= out[a];
        stride *= in[a];
      }
      index[i] = source;
    }
    if (c->isFloat())
      for (int64_t s : index)
        result.floats.push_back(c->floats[s]);
    else
      for (int64_t s : index)
        result.ints.push_back(c->ints[s]);
    g.setConstantOutput(0, std::move(result));
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto result = copiesAlongUnitAxes(g, *x, unit, expanded, out);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// A Reshape of a model exported with a static batch B and compiled for
/// batch b: its constant target holds B (or B folded with other dims, as
/// an attention's [B * heads, T, d] or [T * B, E]). The import at the
/// exported batch gives the input's and the output's shapes at B; the one
/// input dimension d that differs carries the batch, and the output
/// dimension reshapedBatchPlacement finds for it scales by b / B. Null
/// when the input's batch cannot be located.
std::optional<SmallVector<int64_t>> rebatchedTarget(GraphImporter &g,
                                                    RankedTensorType in) {
  const onnx::NodeProto &node = g.getNode();
  const SmallVector<int64_t> *inB = g.exportShape(node.input(0));
  const SmallVector<int64_t> *outB = g.exportShape(node.output(0));
  int64_t batchThen = g.getExportBatch(), batchNow = g.getCompiledBatch();
  if (!inB || !outB || inB->size() != static_cast<size_t>(in.getRank()) ||
      batchThen <= 0 || batchNow <= 0)
    return std::nullopt;
  SmallVector<int64_t> differ;
  for (int64_t i = 0; i < in.getRank(); ++i)
    if ((*inB)[i] != in.getDimSize(i))
      differ.push_back(i);
  if (differ.size() != 1)
    return std::nullopt;
  size_t d = differ[0];
  int64_t then = (*inB)[d];
  if (then % batchThen != 0 || then / batchThen * batchNow != in.getDimSize(d))
    return std::nullopt;
  // Unknown: the batch outermost in its dimension (as PyTorch folds it
  // with attention heads).
  int64_t inner = g.batchInner(node.input(0)).value_or(then / batchThen);
  std::optional<BatchPlacement> placed = reshapedBatchPlacement(
      *inB, BatchPlacement{static_cast<int64_t>(d), inner}, *outB, batchThen);
  if (!placed)
    return std::nullopt;
  SmallVector<int64_t> shape(*outB);
  shape[placed->axis] = (*outB)[placed->axis] / batchThen * batchNow;
  g.setBatchInner(node.output(0), placed->inner);
  return shape;
}

/// Says how to export a model whose static batch its constants carry.
InFlightDiagnostic &staticBatchHint(GraphImporter &g, InFlightDiagnostic &d) {
  if (g.exportShape(g.getNode().input(0)))
    d << "; the model was exported with a static batch that this shape "
         "carries and gpipe cannot tell which dimension holds it: export "
         "with the batch dynamic (torch.onnx.export(..., dynamic_axes={"
         "'input': {0: 'batch'}, ...}))";
  return d;
}

LogicalResult importReshape(GraphImporter &g) {
  if (failed(g.checkAttrs({"allowzero"})))
    return failure();
  bool allowZero = g.intAttr("allowzero", 0) != 0;
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  auto target = requireShapeVector(g, 1, "the target shape");
  if (failed(target))
    return failure();
  SmallVector<int64_t> shape;
  int64_t inferred = -1, known = 1;
  const std::vector<int64_t> &requested = *target;
  for (size_t i = 0; i < requested.size(); ++i) {
    int64_t d = requested[i];
    if (d == 0 && !allowZero) {
      if (i >= static_cast<size_t>(type->getRank()))
        return g.error() << "shape entry " << i
                         << " is 0 (copy) but the input has rank "
                         << type->getRank();
      d = type->getDimSize(i);
    } else if (d == -1) {
      if (inferred >= 0)
        return g.error() << "the target shape has more than one -1";
      inferred = i;
      shape.push_back(1);
      continue;
    } else if (d < 0) {
      return g.error() << "invalid shape entry " << d;
    }
    if (d && known > (int64_t(1) << 40) / d)
      return g.error() << "the target shape has more than 2^40 elements";
    shape.push_back(d);
    known *= d;
  }
  int64_t total = type->getNumElements();
  bool fits = inferred >= 0 ? known != 0 && total % known == 0 : known == total;
  if (fits && inferred >= 0)
    shape[inferred] = total / known;
  if (!fits || g.exportShape(g.getNode().input(0))) {
    // A static-batch export at another batch: the target may carry the
    // exported batch even where it fits (a -1 absorbing it elsewhere).
    if (std::optional<SmallVector<int64_t>> rebatched =
            rebatchedTarget(g, *type)) {
      int64_t count = 1;
      for (int64_t d : *rebatched)
        count *= d;
      if (count == total)
        return reshapeTo(g, *rebatched);
    }
  }
  if (!fits) {
    InFlightDiagnostic d =
        inferred >= 0 ? g.error() << "cannot infer the -1 entry: " << total
                                  << " elements are not divisible by " << known
                      : g.error() << "cannot reshape " << *type << " (" << total
                                  << " elements) to " << known << " elements";
    staticBatchHint(g, d);
    return failure();
  }
  return reshapeTo(g, shape);
}

LogicalResult importFlatten(GraphImporter &g) {
  if (failed(g.checkAttrs({"axis"})))
    return failure();
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank(), axis = g.intAttr("axis", 1);
  if (axis < -rank || axis > rank)
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? outer : inner) *= type->getDimSize(i);
  return reshapeTo(g, {outer, inner});
}

/// Axes of Squeeze/Unsqueeze: an attribute before opset 13, then an input.
FailureOr<std::optional<SmallVector<int64_t>>> readAxes(GraphImporter &g) {
  if (g.getOpset() < 13) {
    if (failed(g.checkAttrs({"axes"})))
      return failure();
    return g.intsAttr("axes");
  }
  if (failed(g.checkAttrs({})))
    return failure();
  if (!g.hasInput(1))
    return std::optional<SmallVector<int64_t>>();
  auto axes = g.requireConstant(1, "axes");
  if (failed(axes))
    return failure();
  std::vector<int64_t> v = (*axes)->toInts();
  return std::optional<SmallVector<int64_t>>(
      SmallVector<int64_t>(v.begin(), v.end()));
}

LogicalResult importSqueeze(GraphImporter &g) {
  auto type = g.inputType(0);
  auto axes = readAxes(g);
  if (failed(type) || failed(axes))
    return failure();
  SmallVector<int64_t> shape;
  if (!*axes) {
    for (int64_t d : type->getShape())
      if (d != 1)
        shape.push_back(d);
    return reshapeTo(g, shape);
  }
  auto normalized = normalizeAxes(g, **axes, type->getRank());
  if (failed(normalized))
    return failure();
  for (int64_t i = 0; i < type->getRank(); ++i) {
    if (!llvm::is_contained(*normalized, i)) {
      shape.push_back(type->getDimSize(i));
      continue;
    }
    if (type->getDimSize(i) != 1)
      return g.error() << "cannot squeeze axis " << i << " of size "
                       << type->getDimSize(i);
  }
  return reshapeTo(g, shape);
}

LogicalResult importUnsqueeze(GraphImporter &g) {
  auto type = g.inputType(0);
  auto axes = readAxes(g);
  if (failed(type) || failed(axes))
    return failure();
  if (!*axes)
    return g.error() << "axes are required";
  int64_t outRank = type->getRank() + (*axes)->size();
  auto normalized = normalizeAxes(g, **axes, outRank);
  if (failed(normalized))
    return failure();
  SmallVector<int64_t> shape;
  ArrayRef<int64_t> in = type->getShape();
  for (int64_t i = 0; i < outRank; ++i) {
    if (llvm::is_contained(*normalized, i)) {
      shape.push_back(1);
    } else {
      shape.push_back(in.front());
      in = in.drop_front();
    }
  }
  return reshapeTo(g, shape);
}

/// Transpose: folded when its input is an integer constant (a shape
/// computation: the pads of Swin's shifted windows), else nn.transpose.
LogicalResult importTranspose(GraphImporter &g) {
  if (failed(g.checkAttrs({"perm"})))
    return failure();
  const ConstTensor *c = g.constantInput(0);
  if (c && c->isFloat())
    c = nullptr;
  FailureOr<Value> x;
  int64_t rank = 0;
  if (c) {
    rank = static_cast<int64_t>(c->shape.size());
  } else {
    x = g.input(0);
    if (failed(x))
      return failure();
    rank = cast<RankedTensorType>(x->getType()).getRank();
  }
  SmallVector<int64_t> perm;
  if (auto p = g.intsAttr("perm"); p && !p->empty())
    perm = *p;
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  if (c) {
    SmallVector<int64_t> sorted(perm);
    llvm::sort(sorted);
    bool permutation = static_cast<int64_t>(sorted.size()) == rank;
    for (int64_t i = 0; permutation && i < rank; ++i)
      permutation = sorted[i] == i;
    if (!permutation)
      return g.error() << "perm is not a permutation of the " << rank
                       << " axes";
    g.setConstantOutput(0, foldTranspose(*c, perm));
    return success();
  }
  auto result = g.createValue<nn::TransposeOp>(
      {*x}, {g.named("perm", g.getBuilder().getDenseI64ArrayAttr(perm))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importConcat(GraphImporter &g) {
  if (failed(g.checkAttrs({"axis"})))
    return failure();
  if (!g.hasAttr("axis"))
    return g.error() << "attribute 'axis' is required";
  int64_t axis = g.intAttr("axis", 0);
  if (g.numInputs() == 0)
    return g.error() << "needs at least one input";
  if (g.allInputsConstant() && !g.failed()) {
    SmallVector<const ConstTensor *> parts;
    for (size_t i = 0; i < g.numInputs(); ++i)
      parts.push_back(g.constantInput(i));
    const ConstTensor &first = *parts.front();
    int64_t rank = first.shape.size();
    if (axis < -rank || axis >= rank)
      return g.error() << "axis " << axis << " is out of range for rank "
                       << rank;
    if (axis < 0)
      axis += rank;
    for (const ConstTensor *p : parts) {
      if (p->dtype != first.dtype ||
          p->shape.size() != static_cast<size_t>(rank))
        return g.error() << "inputs must have the same rank and type";
      for (int64_t i = 0; i < rank; ++i)
        if (i != axis && p->shape[i] != first.shape[i])
          return g.error() << "inputs differ on axis " << i;
    }
    g.setConstantOutput(0, foldConcat(parts, axis));
    return success();
  }
  auto operands = g.inputs(g.numInputs());
  if (failed(operands))
    return failure();
  int64_t rank = cast<RankedTensorType>(operands->front().getType()).getRank();
  if (axis < -rank || axis >= rank)
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  auto result = g.createValue<nn::ConcatOp>(
      *operands, {g.named("axis", g.getBuilder().getI64IntegerAttr(axis))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importSlice(GraphImporter &g) {
  bool attrForm = g.getOpset() < 10;
  if (failed(g.checkAttrs(attrForm
                              ? ArrayRef<StringRef>{"starts", "ends", "axes"}
                              : ArrayRef<StringRef>{})))
    return failure();
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  std::vector<int64_t> starts, ends, axes;
  if (attrForm) {
    auto s = g.intsAttr("starts");
    auto e = g.intsAttr("ends");
    if (!s || !e)
      return g.error() << "attributes 'starts' and 'ends' are required";
    starts.assign(s->begin(), s->end());
    ends.assign(e->begin(), e->end());
    if (auto a = g.intsAttr("axes"))
      axes.assign(a->begin(), a->end());
    else
      for (size_t i = 0; i < starts.size(); ++i)
        axes.push_back(i);
  } else {
    auto startsT = g.requireConstant(1, "starts");
    if (failed(startsT))
      return failure();
    auto endsT = g.requireConstant(2, "ends");
    if (failed(endsT))
      return failure();
    starts = (*startsT)->toInts();
    ends = (*endsT)->toInts();
  }
  std::vector<int64_t> steps(starts.size(), 1);
  if (!attrForm && g.hasInput(3)) {
    auto a = g.requireConstant(3, "axes");
    if (failed(a))
      return failure();
    axes = (*a)->toInts();
  } else if (!attrForm) {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  }
  if (g.hasInput(4)) {
    auto s = g.requireConstant(4, "steps");
    if (failed(s))
      return failure();
    steps = (*s)->toInts();
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return g.error() << "starts, ends, axes and steps must have the same "
                        "length";
  auto normalized = normalizeAxes(g, axes, rank);
  if (failed(normalized))
    return failure();
  SmallVector<int64_t> allStarts(rank, 0), allEnds(type->getShape()),
      allSteps(rank, 1), shape(type->getShape());
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t axis = (*normalized)[k], dim = type->getDimSize(axis);
    int64_t step = steps[k];
    if (step == 0)
      return g.error() << "step of axis " << axis << " is zero";
    // A step beyond the axis size selects at most one element either way.
    step = std::clamp<int64_t>(step, -std::max<int64_t>(dim, 1),
                               std::max<int64_t>(dim, 1));
    auto clampIndex = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0)
        v = v < -dim ? lo : v + dim;
      return std::clamp(v, lo, hi);
    };
    int64_t start, end;
    if (step > 0) {
      start = clampIndex(starts[k], 0, dim);
      end = clampIndex(ends[k], 0, dim);
    } else {
      start = clampIndex(starts[k], -1, dim - 1);
      end = clampIndex(ends[k], -1, dim - 1);
    }
    allStarts[axis] = start;
    allEnds[axis] = end;
    allSteps[axis] = step;
    int64_t size = step > 0 ? (end - start + step - 1) / step
                            : (start - end - step - 1) / -step;
    shape[axis] = std::max<int64_t>(size, 0);
  }
  if (const ConstTensor *c = g.constantInput(0)) {
    g.setConstantOutput(0, foldSlice(*c, allStarts, allSteps, shape));
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  Builder &b = g.getBuilder();
  auto result = g.createValue<nn::SliceOp>(
      {*x}, {g.named("starts", b.getDenseI64ArrayAttr(allStarts)),
             g.named("ends", b.getDenseI64ArrayAttr(allEnds)),
             g.named("steps", b.getDenseI64ArrayAttr(allSteps))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importSplit(GraphImporter &g) {
  bool splitIsInput = g.getOpset() >= 13;
  if (failed(g.checkAttrs(splitIsInput ? ArrayRef<StringRef>{"axis"}
                                       : ArrayRef<StringRef>{"axis", "split"})))
    return failure();
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  int64_t rank = type.getRank(), axis = g.intAttr("axis", 0);
  if (axis < -rank || axis >= rank)
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  int64_t outputs = g.getNode().output_size();
  SmallVector<int64_t> sizes;
  if (splitIsInput && g.hasInput(1)) {
    auto s = g.requireConstant(1, "split");
    if (failed(s))
      return failure();
    std::vector<int64_t> v = (*s)->toInts();
    sizes.assign(v.begin(), v.end());
  } else if (auto s = g.intsAttr("split"); !splitIsInput && s && !s->empty()) {
    sizes = *s;
  } else {
    if (outputs == 0 || type.getDimSize(axis) % outputs != 0)
      return g.error() << "axis size " << type.getDimSize(axis)
                       << " does not split evenly into " << outputs
                       << " outputs";
    sizes.assign(outputs, type.getDimSize(axis) / outputs);
  }
  if (static_cast<int64_t>(sizes.size()) != outputs)
    return g.error() << "split has " << sizes.size() << " sizes for " << outputs
                     << " outputs";
  auto op = g.create<nn::SplitOp>(
      {*x}, {g.named("axis", g.getBuilder().getI64IntegerAttr(axis)),
             g.named("sizes", g.getBuilder().getDenseI64ArrayAttr(sizes))});
  if (failed(op))
    return failure();
  for (int64_t i = 0; i < outputs; ++i)
    g.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult importGather(GraphImporter &g) {
  if (failed(g.checkAttrs({"axis"})))
    return failure();
  auto dataType = g.inputType(0);
  auto indicesType = g.inputType(1);
  if (failed(dataType) || failed(indicesType))
    return failure();
  int64_t rank = dataType->getRank(), axis = g.intAttr("axis", 0);
  if (rank == 0 || axis < -rank || axis >= rank)
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  const ConstTensor *indices = g.constantInput(1);
  if (!indices) {
    auto operands = g.inputs(2);
    if (failed(operands))
      return failure();
    auto result = g.createValue<nn::GatherOp>(
        *operands, {g.named("axis", g.getBuilder().getI64IntegerAttr(axis))});
    if (failed(result))
      return failure();
    g.setOutput(0, *result);
    return success();
  }
  if (indices->isFloat())
    return g.error() << "indices must be integers";
  int64_t dim = dataType->getDimSize(axis);
  std::vector<int64_t> normalized = indices->toInts();
  for (int64_t &i : normalized) {
    if (i < -dim || i >= dim)
      return g.error() << "index " << i << " is out of range for axis " << axis
                       << " of size " << dim;
    if (i < 0)
      i += dim;
  }
  if (const ConstTensor *data = g.constantInput(0)) {
    g.setConstantOutput(0, foldGather(*data, normalized, indices->shape, axis));
    return success();
  }
  auto data = g.input(0);
  if (failed(data))
    return failure();
  Value indexValue =
      g.materialize(ConstTensor::ofInts(normalized, indices->shape));
  auto result = g.createValue<nn::GatherOp>(
      {*data, indexValue},
      {g.named("axis", g.getBuilder().getI64IntegerAttr(axis))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importPad(GraphImporter &g) {
  bool attrForm = g.getOpset() < 11;
  if (failed(g.checkAttrs(attrForm
                              ? ArrayRef<StringRef>{"mode", "pads", "value"}
                              : ArrayRef<StringRef>{"mode"})))
    return failure();
  std::string mode = g.stringAttr("mode", "constant");
  auto x = g.input(0);
  if (failed(x))
    return failure();
  std::vector<int64_t> pads;
  double value = 0.0;
  if (attrForm) {
    auto p = g.intsAttr("pads");
    if (!p)
      return g.error() << "attribute 'pads' is required";
    pads.assign(p->begin(), p->end());
    value = g.floatAttr("value", 0.0f);
  } else {
    auto p = g.requireConstant(1, "pads");
    if (failed(p))
      return failure();
    pads = (*p)->toInts();
  }
  if (!attrForm && g.hasInput(2)) {
    auto v = g.requireConstant(2, "constant_value");
    if (failed(v))
      return failure();
    if ((*v)->numElements() != 1)
      return g.error() << "constant_value must be a scalar";
    value = (*v)->floatAt(0);
  }
  if (g.hasInput(3))
    return g.error() << "the axes input (opset 18) is not supported";
  Builder &b = g.getBuilder();
  auto result = g.createValue<nn::PadOp>(
      {*x}, {g.named("pads", b.getDenseI64ArrayAttr(pads)),
             g.named("mode", b.getStringAttr(mode)),
             g.named("value", b.getF64FloatAttr(value))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// ReduceMean and ReduceSum: the axes from the attribute, or (ReduceSum
/// since opset 13) from the optional second input, which must be known at
/// compile time; no axes reduce every axis unless noop_with_empty_axes.
template <typename OpTy> LogicalResult importReduce(GraphImporter &g) {
  bool axesInput = std::is_same_v<OpTy, nn::ReduceSumOp> && g.getOpset() >= 13;
  if (failed(axesInput ? g.checkAttrs({"keepdims", "noop_with_empty_axes"})
                       : g.checkAttrs({"axes", "keepdims"})))
    return failure();
  auto x = g.input(0);
  if (failed(x))
    return failure();
  int64_t rank = cast<RankedTensorType>(x->getType()).getRank();
  std::optional<SmallVector<int64_t>> given;
  if (!axesInput) {
    given = g.intsAttr("axes");
  } else if (g.hasInput(1)) {
    auto t = g.requireConstant(1, "axes");
    if (failed(t))
      return failure();
    std::vector<int64_t> ints = (*t)->toInts();
    given.emplace(ints.begin(), ints.end());
  }
  SmallVector<int64_t> axes;
  if (given && !given->empty()) {
    auto normalized = normalizeAxes(g, *given, rank);
    if (failed(normalized))
      return failure();
    axes = *normalized;
    llvm::sort(axes);
  } else if (axesInput && g.intAttr("noop_with_empty_axes", 0) != 0) {
    g.setOutput(0, *x);
    return success();
  } else {
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  Builder &b = g.getBuilder();
  auto result = g.createValue<OpTy>(
      {*x},
      {g.named("axes", b.getDenseI64ArrayAttr(axes)),
       g.named("keepdims", b.getBoolAttr(g.intAttr("keepdims", 1) != 0))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// CumSum: the axis must be a compile-time constant; folded on constants
/// (token types from a [SEP] position, positions from a padding mask).
LogicalResult importCumSum(GraphImporter &g) {
  if (failed(g.checkAttrs({"exclusive", "reverse"})))
    return failure();
  auto type = g.inputType(0);
  auto axisInput = g.requireConstant(1, "axis");
  if (failed(type) || failed(axisInput))
    return failure();
  if ((*axisInput)->numElements() != 1)
    return g.error() << "axis must be a scalar";
  int64_t rank = type->getRank(), axis = (*axisInput)->intAt(0);
  if (rank == 0 || axis < -rank || axis >= rank)
    return g.error() << "axis " << axis << " is out of range for rank " << rank;
  if (axis < 0)
    axis += rank;
  bool exclusive = g.intAttr("exclusive", 0) != 0,
       reverse = g.intAttr("reverse", 0) != 0;
  if (const ConstTensor *x = g.constantInput(0)) {
    ConstTensor out = *x;
    int64_t outer = 1, size = x->shape[axis], inner = 1;
    for (int64_t i = 0; i < axis; ++i)
      outer *= x->shape[i];
    for (int64_t i = axis + 1; i < rank; ++i)
      inner *= x->shape[i];
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t b = 0; b < inner; ++b) {
        double fsum = 0.0;
        int64_t isum = 0;
        for (int64_t j = 0; j < size; ++j) {
          int64_t at = (a * size + (reverse ? size - 1 - j : j)) * inner + b;
          if (x->isFloat()) {
            double v = x->floats[at];
            out.floats[at] = exclusive ? fsum : fsum + v;
            fsum += v;
          } else {
            int64_t v = x->ints[at];
            out.ints[at] = exclusive ? isum : isum + v;
            isum += v;
          }
        }
      }
    g.setConstantOutput(0, out.castTo(out.dtype)); // rounds to the dtype
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  Builder &b = g.getBuilder();
  auto result = g.createValue<nn::CumSumOp>(
      {*x}, {g.named("axis", b.getI64IntegerAttr(axis)),
             g.named("exclusive", b.getBoolAttr(exclusive)),
             g.named("reverse", b.getBoolAttr(reverse))});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

} // namespace

void gpipe::onnx_import::registerShapeImporters(OpImporterTable &t) {
  t.add("Reshape", 5, importReshape);
  t.add("Expand", 8, importExpand);
  t.add("Tile", 6, importTile);
  t.add("Flatten", 1, importFlatten);
  t.add("Squeeze", 1, importSqueeze);
  t.add("Unsqueeze", 1, importUnsqueeze);
  t.add("Transpose", 1, importTranspose);
  t.add("Concat", 4, importConcat);
  t.add("Slice", 1, importSlice);
  t.add("Split", 2, importSplit);
  t.add("Gather", 1, importGather);
  t.add("Pad", 2, importPad);
  t.add("ReduceMean", 1, importReduce<nn::ReduceMeanOp>);
  t.add("ReduceSum", 1, importReduce<nn::ReduceSumOp>);
  t.add("CumSum", 11, importCumSum);
}

FailureOr<Value> gpipe::onnx_import::reshapeTo(GraphImporter &g, Value x,
                                               ArrayRef<int64_t> shape) {
  if (cast<RankedTensorType>(x.getType()).getShape() == shape)
    return x;
  return g.createValue<nn::ReshapeOp>(
      {x}, {g.named("shape", g.getBuilder().getDenseI64ArrayAttr(shape))});
}

FailureOr<Value> gpipe::onnx_import::copiesAlongUnitAxes(
    GraphImporter &g, Value x, ArrayRef<int64_t> unit,
    ArrayRef<int64_t> expanded, ArrayRef<int64_t> out) {
  Builder &b = g.getBuilder();
  auto withUnits = g.createValue<nn::ReshapeOp>(
      {x}, {g.named("shape", b.getDenseI64ArrayAttr(unit))});
  if (failed(withUnits))
    return failure();
  auto copies = g.createValue<nn::BroadcastOp>(
      {*withUnits}, {g.named("shape", b.getDenseI64ArrayAttr(expanded))});
  if (failed(copies))
    return failure();
  return g.createValue<nn::ReshapeOp>(
      {*copies}, {g.named("shape", b.getDenseI64ArrayAttr(out))});
}
