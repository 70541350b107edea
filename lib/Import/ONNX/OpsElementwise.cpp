//===- OpsElementwise.cpp - Importers of element-wise ONNX ops ------------===//
//
// Activations, arithmetic with broadcasting, Dropout, Identity and Cast.
// Integer arithmetic on compile-time constants (shape computations) is
// folded; everything else becomes nn ops.
//
//===----------------------------------------------------------------------===//
#include "ConstFolding.h"
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

#include <limits>

#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

template <typename OpTy>
LogicalResult importUnaryWith(GraphImporter &g,
                              ArrayRef<NamedAttribute> attrs) {
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto result = g.createValue<OpTy>({*x}, attrs);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

template <typename OpTy> LogicalResult importUnary(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  return importUnaryWith<OpTy>(g, {});
}

LogicalResult importLeakyRelu(GraphImporter &g) {
  if (failed(g.checkAttrs({"alpha"})))
    return failure();
  float alpha = g.floatAttr("alpha", 0.01f);
  return importUnaryWith<nn::LeakyReluOp>(
      g, {g.named("alpha", g.getBuilder().getF32FloatAttr(alpha))});
}

/// Clip: bounds as attributes (opset 6) or optional constant inputs
/// (opset 11); a missing bound is infinite.
LogicalResult importClip(GraphImporter &g) {
  bool inputs = g.getOpset() >= 11;
  if (failed(g.checkAttrs(inputs ? ArrayRef<StringRef>{}
                                 : ArrayRef<StringRef>{"min", "max"})))
    return failure();
  float inf = std::numeric_limits<float>::infinity();
  float bounds[2] = {-inf, inf};
  for (int k = 0; k < 2; ++k) {
    if (!inputs) {
      bounds[k] = g.floatAttr(k == 0 ? "min" : "max", bounds[k]);
      continue;
    }
    if (!g.hasInput(1 + k))
      continue;
    auto c = g.requireConstant(1 + k, k == 0 ? "min" : "max");
    if (failed(c))
      return failure();
    if ((*c)->numElements() != 1)
      return g.error() << (k == 0 ? "min" : "max") << " must be a scalar";
    bounds[k] = static_cast<float>((*c)->floatAt(0));
  }
  Builder &b = g.getBuilder();
  return importUnaryWith<nn::ClipOp>(
      g, {g.named("min", b.getF32FloatAttr(bounds[0])),
          g.named("max", b.getF32FloatAttr(bounds[1]))});
}

LogicalResult importHardSigmoid(GraphImporter &g) {
  if (failed(g.checkAttrs({"alpha", "beta"})))
    return failure();
  Builder &b = g.getBuilder();
  return importUnaryWith<nn::HardSigmoidOp>(
      g, {g.named("alpha", b.getF32FloatAttr(g.floatAttr("alpha", 0.2f))),
          g.named("beta", b.getF32FloatAttr(g.floatAttr("beta", 0.5f)))});
}

LogicalResult importGelu(GraphImporter &g) {
  if (failed(g.checkAttrs({"approximate"})))
    return failure();
  std::string approximate = g.stringAttr("approximate", "none");
  return importUnaryWith<nn::GeluOp>(
      g, {g.named("approximate", g.getBuilder().getStringAttr(approximate))});
}

/// Add/Sub/Mul/Div/Pow: folded on integer constants, else an nn op.
template <typename OpTy>
LogicalResult importBinary(GraphImporter &g,
                           std::function<int64_t(int64_t, int64_t)> intFn) {
  if (failed(g.checkAttrs({})))
    return failure();
  const ConstTensor *a = g.constantInput(0), *b = g.constantInput(1);
  if (intFn && a && b && !a->isFloat() && !b->isFloat()) {
    if (std::optional<ConstTensor> folded =
            foldBinary(*a, *b, intFn, [](double x, double) { return x; })) {
      g.setConstantOutput(0, std::move(*folded));
      return success();
    }
  }
  auto lhs = g.input(0);
  if (failed(lhs))
    return failure();
  auto rhs = g.input(1);
  if (failed(rhs))
    return failure();
  auto result = g.createValue<OpTy>({*lhs, *rhs});
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

LogicalResult importAdd(GraphImporter &g) {
  return importBinary<nn::AddOp>(g, [](int64_t x, int64_t y) {
    return static_cast<int64_t>(static_cast<uint64_t>(x) +
                                static_cast<uint64_t>(y));
  });
}
LogicalResult importSub(GraphImporter &g) {
  return importBinary<nn::SubOp>(g, [](int64_t x, int64_t y) {
    return static_cast<int64_t>(static_cast<uint64_t>(x) -
                                static_cast<uint64_t>(y));
  });
}
LogicalResult importMul(GraphImporter &g) {
  return importBinary<nn::MulOp>(g, [](int64_t x, int64_t y) {
    return static_cast<int64_t>(static_cast<uint64_t>(x) *
                                static_cast<uint64_t>(y));
  });
}
LogicalResult importDiv(GraphImporter &g) {
  // Integer division by zero cannot be folded; leave it to run time.
  const ConstTensor *b = g.constantInput(1);
  bool hasZero = b && !b->isFloat() && llvm::is_contained(b->ints, int64_t(0));
  if (hasZero)
    return importBinary<nn::DivOp>(g, nullptr);
  return importBinary<nn::DivOp>(g, [](int64_t x, int64_t y) {
    return (x == INT64_MIN && y == -1) ? x : x / y;
  });
}
LogicalResult importPow(GraphImporter &g) {
  return importBinary<nn::PowOp>(g, nullptr);
}

LogicalResult importDropout(GraphImporter &g) {
  bool hasInputs = g.getOpset() >= 12;
  if (failed(g.checkAttrs(
          hasInputs ? ArrayRef<StringRef>{"seed"}
                    : ArrayRef<StringRef>{"seed", "ratio", "is_test"})))
    return failure();
  double ratio = 0.5;
  bool training = false;
  if (hasInputs) {
    if (g.hasInput(1)) {
      auto r = g.requireConstant(1, "ratio");
      if (failed(r))
        return failure();
      if ((*r)->numElements() != 1)
        return g.error() << "ratio must be a scalar";
      ratio = (*r)->floatAt(0);
    }
    if (g.hasInput(2)) {
      auto t = g.requireConstant(2, "training_mode");
      if (failed(t))
        return failure();
      if ((*t)->numElements() != 1)
        return g.error() << "training_mode must be a scalar";
      training = (*t)->intAt(0) != 0;
    }
  } else {
    ratio = g.floatAttr("ratio", 0.5f);
  }
  if (training && ratio != 0.0) {
    g.rejectOutputsFrom(1, "the random dropout mask");
  } else if (g.getNode().output_size() > 1 && !g.getNode().output(1).empty()) {
    // Deterministic dropout keeps every element: the mask is all true.
    auto type = g.inputType(0);
    if (failed(type))
      return failure();
    ConstTensor mask = ConstTensor::ofInts({1}, {}, DType::Bool);
    mask.shape.assign(type->getShape().begin(), type->getShape().end());
    mask.ints.assign(type->getNumElements(), 1);
    g.setConstantOutput(1, std::move(mask));
  }
  return importUnaryWith<nn::DropoutOp>(
      g, {g.named("ratio", g.getBuilder().getF32FloatAttr(ratio)),
          g.named("training", g.getBuilder().getBoolAttr(training))});
}

LogicalResult importIdentity(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  if (const ConstTensor *c = g.constantInput(0)) {
    g.setConstantOutput(0, *c);
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  g.setOutput(0, *x);
  return success();
}

LogicalResult importCast(GraphImporter &g) {
  if (failed(g.checkAttrs({"to", "saturate"})))
    return failure();
  int64_t to = g.intAttr("to", 0);
  if (!g.hasAttr("to"))
    return g.error() << "attribute 'to' is required";
  auto elementType = elementTypeOf(g.getContext(), static_cast<int32_t>(to));
  if (!elementType)
    return g.error() << llvm::toString(elementType.takeError());
  if (const ConstTensor *c = g.constantInput(0)) {
    g.setConstantOutput(0, c->castTo(static_cast<DType>(to)));
    return success();
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  auto inType = cast<RankedTensorType>(x->getType());
  auto op = g.createWithTypes(nn::CastOp::getOperationName(), {*x},
                              {inType.clone(*elementType)}, {});
  if (failed(op))
    return failure();
  g.setOutput(0, (*op)->getResult(0));
  return success();
}

} // namespace

void gpipe::onnx_import::registerElementwiseImporters(OpImporterTable &t) {
  t.add("Relu", 6, importUnary<nn::ReluOp>);
  t.add("LeakyRelu", 6, importLeakyRelu);
  t.add("Sigmoid", 6, importUnary<nn::SigmoidOp>);
  t.add("Tanh", 6, importUnary<nn::TanhOp>);
  t.add("Erf", 9, importUnary<nn::ErfOp>);
  t.add("Sqrt", 6, importUnary<nn::SqrtOp>);
  t.add("Neg", 6, importUnary<nn::NegOp>);
  t.add("Clip", 6, importClip);
  t.add("HardSigmoid", 6, importHardSigmoid);
  t.add("HardSwish", 14, importUnary<nn::HardSwishOp>);
  // Gelu joined the default domain in opset 20; exporters of opsets <= 17
  // emit it in the com.microsoft domain.
  t.add("Gelu", 1, importGelu, "com.microsoft");
  t.add("Add", 7, importAdd);
  t.add("Sub", 7, importSub);
  t.add("Mul", 7, importMul);
  t.add("Div", 7, importDiv);
  t.add("Pow", 7, importPow);
  t.add("Dropout", 7, importDropout);
  t.add("Identity", 1, importIdentity);
  t.add("Cast", 6, importCast);
}
