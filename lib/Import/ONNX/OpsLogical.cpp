//===- OpsLogical.cpp - Importers of comparison, logic and mask ops -------===//
//
// Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not, And, Or, Xor,
// Where, Mod and Trilu: the ops attention masks are built from. On
// compile-time constants (a causal mask made from a registered buffer or
// from `torch.ones(T, T).triu()`) they fold; on run-time tensors they
// become nn ops.
//
//===----------------------------------------------------------------------===//
#include "ConstFolding.h"
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// Folds when every input is a constant (`folder` returns nullopt when it
/// cannot), else builds `OpTy` on the inputs.
template <typename OpTy>
LogicalResult importFoldable(GraphImporter &g, size_t numInputs,
                             llvm::function_ref<std::optional<ConstTensor>(
                                 ArrayRef<const ConstTensor *>)>
                                 folder,
                             ArrayRef<NamedAttribute> attrs = {}) {
  SmallVector<const ConstTensor *> constants;
  for (size_t i = 0; i < numInputs; ++i)
    constants.push_back(g.constantInput(i));
  if (!llvm::is_contained(constants, nullptr)) {
    if (std::optional<ConstTensor> folded = folder(constants)) {
      g.setConstantOutput(0, std::move(*folded));
      return success();
    }
  }
  auto operands = g.inputs(numInputs);
  if (failed(operands))
    return failure();
  auto result = g.createValue<OpTy>(*operands, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// A comparison: `cmp(a, b)` on doubles for float inputs, on int64 else.
template <typename OpTy, typename Cmp>
LogicalResult importCompare(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  return importFoldable<OpTy>(
      g, 2, [](ArrayRef<const ConstTensor *> in) -> std::optional<ConstTensor> {
        const ConstTensor &a = *in[0], &b = *in[1];
        if (a.dtype != b.dtype)
          return std::nullopt; // the op's verifier says why
        return foldBroadcast(
            in, DType::Bool,
            [&](ArrayRef<int64_t> at, ConstTensor &out, int64_t i) {
              out.ints[i] = a.isFloat()
                                ? Cmp()(a.floats[at[0]], b.floats[at[1]])
                                : Cmp()(a.ints[at[0]], b.ints[at[1]]);
            });
      });
}

/// Boolean logic on bool tensors.
template <typename OpTy, typename Fn>
LogicalResult importLogical(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  return importFoldable<OpTy>(
      g, 2, [](ArrayRef<const ConstTensor *> in) -> std::optional<ConstTensor> {
        if (in[0]->dtype != DType::Bool || in[1]->dtype != DType::Bool)
          return std::nullopt;
        return foldBroadcast(
            in, DType::Bool,
            [&](ArrayRef<int64_t> at, ConstTensor &out, int64_t i) {
              out.ints[i] =
                  Fn()(in[0]->ints[at[0]] != 0, in[1]->ints[at[1]] != 0);
            });
      });
}

LogicalResult importNot(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  return importFoldable<nn::NotOp>(
      g, 1, [](ArrayRef<const ConstTensor *> in) -> std::optional<ConstTensor> {
        if (in[0]->dtype != DType::Bool)
          return std::nullopt;
        ConstTensor out = *in[0];
        for (int64_t &v : out.ints)
          v = v == 0;
        return out;
      });
}

LogicalResult importWhere(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  return importFoldable<nn::WhereOp>(
      g, 3, [](ArrayRef<const ConstTensor *> in) -> std::optional<ConstTensor> {
        const ConstTensor &c = *in[0], &x = *in[1], &y = *in[2];
        if (c.dtype != DType::Bool || x.dtype != y.dtype)
          return std::nullopt;
        return foldBroadcast(
            in, x.dtype,
            [&](ArrayRef<int64_t> at, ConstTensor &out, int64_t i) {
              bool takeX = c.ints[at[0]] != 0;
              if (out.isFloat())
                out.floats[i] = takeX ? x.floats[at[1]] : y.floats[at[2]];
              else
                out.ints[i] = takeX ? x.ints[at[1]] : y.ints[at[2]];
            });
      });
}

/// Mod: integers with the divisor's sign (fmod = 0, Python's %) or the
/// dividend's (fmod = 1); floats need fmod = 1, as ONNX requires.
LogicalResult importMod(GraphImporter &g) {
  if (failed(g.checkAttrs({"fmod"})))
    return failure();
  bool fmod = g.intAttr("fmod", 0) != 0;
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  if (isa<FloatType>(type->getElementType()) && !fmod)
    return g.error() << "Mod on floating-point inputs needs fmod=1 (ONNX "
                        "defines fmod=0 for integers only)";
  const ConstTensor *divisor = g.constantInput(1);
  if (divisor && !divisor->isFloat() &&
      llvm::is_contained(divisor->ints, int64_t(0)))
    return g.error() << "Mod by a constant divisor that holds 0";
  return importFoldable<nn::ModOp>(
      g, 2,
      [&](ArrayRef<const ConstTensor *> in) {
        return foldBinary(
            *in[0], *in[1],
            [&](int64_t x, int64_t y) {
              int64_t r = (x == INT64_MIN && y == -1) ? 0 : x % y;
              return !fmod && r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
            },
            [](double x, double y) { return std::fmod(x, y); });
      },
      {g.named("fmod", g.getBuilder().getBoolAttr(fmod))});
}

/// Trilu: keeps the upper (or lower) triangle of the last two axes from
/// diagonal k on. Folded on constants; on a run-time tensor it is a `where`
/// with a constant mask, whose gradient is the mask's.
LogicalResult importTrilu(GraphImporter &g) {
  if (failed(g.checkAttrs({"upper"})))
    return failure();
  bool upper = g.intAttr("upper", 1) != 0;
  int64_t k = 0;
  if (g.hasInput(1)) {
    auto kc = g.requireConstant(1, "k");
    if (failed(kc))
      return failure();
    if ((*kc)->numElements() != 1)
      return g.error() << "k must be a scalar";
    k = (*kc)->intAt(0);
  }
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  if (type->getRank() < 2)
    return g.error() << "Trilu needs an input of rank 2 or more, got " << *type;
  int64_t rows = type->getDimSize(type->getRank() - 2),
          cols = type->getDimSize(type->getRank() - 1);
  std::vector<int64_t> keep(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      keep[i * cols + j] = upper ? j - i >= k : j - i <= k;
  ConstTensor mask = ConstTensor::ofInts(keep, {rows, cols}, DType::Bool);
  if (const ConstTensor *x = g.constantInput(0)) {
    std::optional<ConstTensor> out =
        foldBroadcast({&mask, x}, x->dtype,
                      [&](ArrayRef<int64_t> at, ConstTensor &out, int64_t i) {
                        bool keep = mask.ints[at[0]] != 0;
                        if (out.isFloat())
                          out.floats[i] = keep ? x->floats[at[1]] : 0.0;
                        else
                          out.ints[i] = keep ? x->ints[at[1]] : 0;
                      });
    g.setConstantOutput(0, std::move(*out));
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  Type element = type->getElementType();
  auto zero = g.createValue<nn::ConstantOp>(
      {}, {g.named("value", DenseElementsAttr::get(
                                RankedTensorType::get({}, element),
                                g.getBuilder().getZeroAttr(element)))});
  if (failed(zero))
    return failure();
  auto result = g.createValue<nn::WhereOp>({g.materialize(mask), *x, *zero});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

} // namespace

void gpipe::onnx_import::registerLogicalImporters(OpImporterTable &t) {
  t.add("Equal", 7, importCompare<nn::EqualOp, std::equal_to<>>);
  t.add("Less", 7, importCompare<nn::LessOp, std::less<>>);
  t.add("LessOrEqual", 12, importCompare<nn::LessEqualOp, std::less_equal<>>);
  t.add("Greater", 7, importCompare<nn::GreaterOp, std::greater<>>);
  t.add("GreaterOrEqual", 12,
        importCompare<nn::GreaterEqualOp, std::greater_equal<>>);
  t.add("And", 7, importLogical<nn::AndOp, std::logical_and<>>);
  t.add("Or", 7, importLogical<nn::OrOp, std::logical_or<>>);
  t.add("Xor", 7, importLogical<nn::XorOp, std::not_equal_to<>>);
  t.add("Not", 1, importNot);
  t.add("Where", 9, importWhere);
  t.add("Mod", 10, importMod);
  t.add("Trilu", 14, importTrilu);
}
