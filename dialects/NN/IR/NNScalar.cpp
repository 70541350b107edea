//===- NNScalar.cpp - Scalar semantics of element-wise nn ops -------------===//
//
// ElementwiseOpInterface: the computation of one output element, built with
// arith and math ops. The conversion to linalg.generic uses these bodies.
//
//===----------------------------------------------------------------------===//
#include "NN/IR/NNOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;
using namespace gpipe::nn;

namespace {

Type resultElementType(Operation *op) {
  return cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
}

Value floatConstant(OpBuilder &b, Location loc, Type type, double value) {
  return b.create<arith::ConstantOp>(loc, b.getFloatAttr(type, value));
}

/// Fails with an error naming the op and type unless `type` is a float.
bool requireFloat(Operation *op, Type type) {
  if (isa<FloatType>(type))
    return true;
  op->emitOpError("code generation supports floating-point element types "
                  "only, got ")
      << type;
  return false;
}

bool isUnsigned(Type type) {
  auto intType = dyn_cast<IntegerType>(type);
  return intType && intType.isUnsigned();
}

/// Converts a scalar between element types with C semantics.
Value convertScalar(OpBuilder &b, Location loc, Value v, Type to) {
  Type from = v.getType();
  if (from == to)
    return v;
  auto fromFloat = dyn_cast<FloatType>(from), toFloat = dyn_cast<FloatType>(to);
  if (fromFloat && toFloat)
    return fromFloat.getWidth() < toFloat.getWidth()
               ? b.create<arith::ExtFOp>(loc, to, v).getResult()
               : b.create<arith::TruncFOp>(loc, to, v).getResult();
  // Builtin signedness lives on the type; arith works on signless integers.
  auto signless = [&](Type t) -> Type {
    if (auto i = dyn_cast<IntegerType>(t))
      return b.getIntegerType(i.getWidth());
    return t;
  };
  Type signlessTo = signless(to);
  if (fromFloat) {
    if (isUnsigned(to))
      return b.create<arith::FPToUIOp>(loc, signlessTo, v);
    if (signlessTo.isInteger(1))
      return b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE, v,
                                     floatConstant(b, loc, from, 0.0));
    return b.create<arith::FPToSIOp>(loc, signlessTo, v);
  }
  unsigned fromWidth = from.getIntOrFloatBitWidth();
  if (toFloat)
    return isUnsigned(from) || fromWidth == 1
               ? b.create<arith::UIToFPOp>(loc, to, v).getResult()
               : b.create<arith::SIToFPOp>(loc, to, v).getResult();
  unsigned toWidth = signlessTo.getIntOrFloatBitWidth();
  if (toWidth == 1)
    return b.create<arith::CmpIOp>(
        loc, arith::CmpIPredicate::ne, v,
        b.create<arith::ConstantOp>(loc, b.getIntegerAttr(v.getType(), 0)));
  if (toWidth < fromWidth)
    return b.create<arith::TruncIOp>(loc, signlessTo, v);
  if (toWidth > fromWidth)
    return isUnsigned(from) || fromWidth == 1
               ? b.create<arith::ExtUIOp>(loc, signlessTo, v).getResult()
               : b.create<arith::ExtSIOp>(loc, signlessTo, v).getResult();
  return v;
}

} // namespace

Value ReluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  return b.create<arith::MaximumFOp>(loc, operands[0],
                                     floatConstant(b, loc, type, 0.0));
}

Value LeakyReluOp::buildScalar(OpBuilder &b, Location loc,
                               ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value x = operands[0];
  Value scaled = b.create<arith::MulFOp>(
      loc, x, floatConstant(b, loc, type, getAlpha().convertToDouble()));
  Value positive = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGE, x,
                                           floatConstant(b, loc, type, 0.0));
  return b.create<arith::SelectOp>(loc, positive, x, scaled);
}

Value NegOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (isa<FloatType>(type))
    return b.create<arith::NegFOp>(loc, operands[0]);
  return b.create<arith::SubIOp>(
      loc, b.create<arith::ConstantOp>(loc, b.getIntegerAttr(type, 0)),
      operands[0]);
}

/// min(max(x, lo), hi), NaN passing through as in PyTorch's clamp.
static Value clamp(OpBuilder &b, Location loc, Value x, Value lo, Value hi) {
  return b.create<arith::MinimumFOp>(
      loc, b.create<arith::MaximumFOp>(loc, x, lo), hi);
}

Value ClipOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  return clamp(b, loc, operands[0],
               floatConstant(b, loc, type, getMin().convertToDouble()),
               floatConstant(b, loc, type, getMax().convertToDouble()));
}

Value HardSigmoidOp::buildScalar(OpBuilder &b, Location loc,
                                 ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value ax = b.create<arith::MulFOp>(
      loc, operands[0],
      floatConstant(b, loc, type, getAlpha().convertToDouble()));
  Value z = b.create<arith::AddFOp>(
      loc, ax, floatConstant(b, loc, type, getBeta().convertToDouble()));
  return clamp(b, loc, z, floatConstant(b, loc, type, 0.0),
               floatConstant(b, loc, type, 1.0));
}

Value HardSwishOp::buildScalar(OpBuilder &b, Location loc,
                               ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value x = operands[0];
  Value shifted =
      b.create<arith::AddFOp>(loc, x, floatConstant(b, loc, type, 3.0));
  Value clamped = clamp(b, loc, shifted, floatConstant(b, loc, type, 0.0),
                        floatConstant(b, loc, type, 6.0));
  return b.create<arith::DivFOp>(loc, b.create<arith::MulFOp>(loc, x, clamped),
                                 floatConstant(b, loc, type, 6.0));
}

Value SigmoidOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value one = floatConstant(b, loc, type, 1.0);
  Value e =
      b.create<math::ExpOp>(loc, b.create<arith::NegFOp>(loc, operands[0]));
  return b.create<arith::DivFOp>(loc, one,
                                 b.create<arith::AddFOp>(loc, one, e));
}

Value TanhOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  if (!requireFloat(*this, resultElementType(*this)))
    return {};
  return b.create<math::TanhOp>(loc, operands[0]);
}

Value ErfOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  if (!requireFloat(*this, resultElementType(*this)))
    return {};
  return b.create<math::ErfOp>(loc, operands[0]);
}

Value SqrtOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  if (!requireFloat(*this, resultElementType(*this)))
    return {};
  return b.create<math::SqrtOp>(loc, operands[0]);
}

Value GeluOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value x = operands[0];
  Value half = floatConstant(b, loc, type, 0.5);
  Value one = floatConstant(b, loc, type, 1.0);
  Value inner;
  if (getApproximate() == "tanh") {
    // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
    Value x3 =
        b.create<arith::MulFOp>(loc, x, b.create<arith::MulFOp>(loc, x, x));
    Value poly = b.create<arith::AddFOp>(
        loc, x,
        b.create<arith::MulFOp>(loc, floatConstant(b, loc, type, 0.044715),
                                x3));
    inner = b.create<math::TanhOp>(
        loc,
        b.create<arith::MulFOp>(
            loc, floatConstant(b, loc, type, std::sqrt(2.0 / M_PI)), poly));
  } else {
    inner = b.create<math::ErfOp>(
        loc, b.create<arith::MulFOp>(loc, x,
                                     floatConstant(b, loc, type, M_SQRT1_2)));
  }
  return b.create<arith::MulFOp>(loc, b.create<arith::MulFOp>(loc, half, x),
                                 b.create<arith::AddFOp>(loc, one, inner));
}

bool DropoutOp::hasScalarForm() { return !isRandom(); }

Value DropoutOp::buildScalar(OpBuilder &, Location, ValueRange operands) {
  if (isRandom()) {
    emitOpError("training-mode dropout with ratio > 0 draws random numbers, "
                "which element-wise code generation does not do");
    return {};
  }
  return operands[0];
}

Value CastOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return convertScalar(b, loc, operands[0], resultElementType(*this));
}

namespace {
/// Float or integer arithmetic; integer division honours signedness.
template <typename FloatOp, typename SignedOp, typename UnsignedOp>
Value buildArith(Operation *op, OpBuilder &b, Location loc,
                 ValueRange operands) {
  Type type = resultElementType(op);
  if (isa<FloatType>(type))
    return b.create<FloatOp>(loc, operands[0], operands[1]);
  if (isUnsigned(type))
    return b.create<UnsignedOp>(loc, operands[0], operands[1]);
  return b.create<SignedOp>(loc, operands[0], operands[1]);
}
} // namespace

Value AddOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return buildArith<arith::AddFOp, arith::AddIOp, arith::AddIOp>(*this, b, loc,
                                                                 operands);
}
Value SubOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return buildArith<arith::SubFOp, arith::SubIOp, arith::SubIOp>(*this, b, loc,
                                                                 operands);
}
Value MulOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return buildArith<arith::MulFOp, arith::MulIOp, arith::MulIOp>(*this, b, loc,
                                                                 operands);
}
Value DivOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return buildArith<arith::DivFOp, arith::DivSIOp, arith::DivUIOp>(
      *this, b, loc, operands);
}

Value PowOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (isa<FloatType>(type)) {
    Value exponent = convertScalar(b, loc, operands[1], type);
    return b.create<math::PowFOp>(loc, operands[0], exponent);
  }
  // Integer powers: computed in double, exact for the results integers hold.
  Type f64 = b.getF64Type();
  Value base = convertScalar(b, loc, operands[0], f64);
  Value exponent = convertScalar(b, loc, operands[1], f64);
  return convertScalar(b, loc, b.create<math::PowFOp>(loc, base, exponent),
                       type);
}

Value ModOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  Value lhs = operands[0], rhs = operands[1];
  if (isa<FloatType>(type))
    return b.create<arith::RemFOp>(loc, lhs, rhs);
  if (isUnsigned(type))
    return b.create<arith::RemUIOp>(loc, lhs, rhs);
  Value rem = b.create<arith::RemSIOp>(loc, lhs, rhs);
  if (getFmod())
    return rem;
  // Python's %: a non-zero remainder whose sign differs from the divisor's
  // moves by one divisor.
  Value zero = b.create<arith::ConstantOp>(loc, b.getIntegerAttr(type, 0));
  Value nonZero =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, rem, zero);
  Value signsDiffer = b.create<arith::XOrIOp>(
      loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, rem, zero),
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, rhs, zero));
  return b.create<arith::SelectOp>(
      loc, b.create<arith::AndIOp>(loc, nonZero, signsDiffer),
      b.create<arith::AddIOp>(loc, rem, rhs), rem);
}

namespace {
/// An ordered float comparison or a signed/unsigned integer one.
Value buildCompare(OpBuilder &b, Location loc, ValueRange operands,
                   arith::CmpFPredicate floatPredicate,
                   arith::CmpIPredicate signedPredicate,
                   arith::CmpIPredicate unsignedPredicate, Type element) {
  if (isa<FloatType>(element))
    return b.create<arith::CmpFOp>(loc, floatPredicate, operands[0],
                                   operands[1]);
  return b.create<arith::CmpIOp>(
      loc, isUnsigned(element) ? unsignedPredicate : signedPredicate,
      operands[0], operands[1]);
}
Type operandElementType(Operation *op) {
  return cast<RankedTensorType>(op->getOperand(0).getType()).getElementType();
}
} // namespace

#define GPIPE_COMPARE_SCALAR(OP, F, S, U)                                      \
  Value OP::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {     \
    return buildCompare(b, loc, operands, arith::CmpFPredicate::F,             \
                        arith::CmpIPredicate::S, arith::CmpIPredicate::U,      \
                        operandElementType(*this));                            \
  }
GPIPE_COMPARE_SCALAR(EqualOp, OEQ, eq, eq)
GPIPE_COMPARE_SCALAR(LessOp, OLT, slt, ult)
GPIPE_COMPARE_SCALAR(LessEqualOp, OLE, sle, ule)
GPIPE_COMPARE_SCALAR(GreaterOp, OGT, sgt, ugt)
GPIPE_COMPARE_SCALAR(GreaterEqualOp, OGE, sge, uge)
#undef GPIPE_COMPARE_SCALAR

Value AndOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<arith::AndIOp>(loc, operands[0], operands[1]);
}
Value OrOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<arith::OrIOp>(loc, operands[0], operands[1]);
}
Value XorOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<arith::XOrIOp>(loc, operands[0], operands[1]);
}
Value NotOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Value one = b.create<arith::ConstantOp>(loc, b.getBoolAttr(true));
  return b.create<arith::XOrIOp>(loc, operands[0], one);
}

Value WhereOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  return b.create<arith::SelectOp>(loc, operands[0], operands[1], operands[2]);
}

Value ReluGradOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value zero = floatConstant(b, loc, type, 0.0);
  Value positive = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT,
                                           operands[1], zero);
  return b.create<arith::SelectOp>(loc, positive, operands[0], zero);
}

Value ClipGradOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value x = operands[1];
  Value inside = b.create<arith::AndIOp>(
      loc,
      b.create<arith::CmpFOp>(
          loc, arith::CmpFPredicate::OGT, x,
          floatConstant(b, loc, type, getMin().convertToDouble())),
      b.create<arith::CmpFOp>(
          loc, arith::CmpFPredicate::OLT, x,
          floatConstant(b, loc, type, getMax().convertToDouble())));
  return b.create<arith::SelectOp>(loc, inside, operands[0],
                                   floatConstant(b, loc, type, 0.0));
}

Value HardSigmoidGradOp::buildScalar(OpBuilder &b, Location loc,
                                     ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value alpha = floatConstant(b, loc, type, getAlpha().convertToDouble());
  Value z = b.create<arith::AddFOp>(
      loc, b.create<arith::MulFOp>(loc, operands[1], alpha),
      floatConstant(b, loc, type, getBeta().convertToDouble()));
  Value inside = b.create<arith::AndIOp>(
      loc,
      b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, z,
                              floatConstant(b, loc, type, 0.0)),
      b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, z,
                              floatConstant(b, loc, type, 1.0)));
  return b.create<arith::SelectOp>(
      loc, inside, b.create<arith::MulFOp>(loc, operands[0], alpha),
      floatConstant(b, loc, type, 0.0));
}

Value HardSwishGradOp::buildScalar(OpBuilder &b, Location loc,
                                   ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value g = operands[0], x = operands[1];
  Value slope = b.create<arith::AddFOp>(
      loc, b.create<arith::DivFOp>(loc, x, floatConstant(b, loc, type, 3.0)),
      floatConstant(b, loc, type, 0.5));
  Value below = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, x,
                                        floatConstant(b, loc, type, -3.0));
  Value middle = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLE, x,
                                         floatConstant(b, loc, type, 3.0));
  Value inner = b.create<arith::SelectOp>(
      loc, middle, b.create<arith::MulFOp>(loc, g, slope), g);
  return b.create<arith::SelectOp>(loc, below, floatConstant(b, loc, type, 0.0),
                                   inner);
}

Value LeakyReluGradOp::buildScalar(OpBuilder &b, Location loc,
                                   ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value grad = operands[0];
  Value scaled = b.create<arith::MulFOp>(
      loc, grad, floatConstant(b, loc, type, getAlpha().convertToDouble()));
  Value positive =
      b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OGT, operands[1],
                              floatConstant(b, loc, type, 0.0));
  return b.create<arith::SelectOp>(loc, positive, grad, scaled);
}

Value BroadcastOp::buildScalar(OpBuilder &, Location, ValueRange operands) {
  return operands[0];
}

Value ErfGradOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value x = operands[1];
  Value e = b.create<math::ExpOp>(
      loc, b.create<arith::NegFOp>(loc, b.create<arith::MulFOp>(loc, x, x)));
  Value slope = b.create<arith::MulFOp>(
      loc, e, floatConstant(b, loc, type, 2.0 / std::sqrt(M_PI)));
  return b.create<arith::MulFOp>(loc, operands[0], slope);
}

Value GeluGradOp::buildScalar(OpBuilder &b, Location loc, ValueRange operands) {
  Type type = resultElementType(*this);
  if (!requireFloat(*this, type))
    return {};
  Value x = operands[1];
  auto c = [&](double v) { return floatConstant(b, loc, type, v); };
  auto mul = [&](Value l, Value r) {
    return b.create<arith::MulFOp>(loc, l, r).getResult();
  };
  auto add = [&](Value l, Value r) {
    return b.create<arith::AddFOp>(loc, l, r).getResult();
  };
  Value slope;
  if (getApproximate() == "tanh") {
    // d/dx 0.5 x (1 + t), t = tanh(k (x + a x^3)):
    // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2).
    double k = std::sqrt(2.0 / M_PI), a = 0.044715;
    Value x2 = mul(x, x);
    Value t =
        b.create<math::TanhOp>(loc, mul(c(k), add(x, mul(c(a), mul(x2, x)))));
    Value dt = b.create<arith::SubFOp>(loc, c(1.0), mul(t, t));
    slope =
        add(mul(c(0.5), add(c(1.0), t)),
            mul(mul(c(0.5 * k), x), mul(dt, add(c(1.0), mul(c(3 * a), x2)))));
  } else {
    // Phi(x) + x phi(x).
    Value phiCdf = mul(
        c(0.5), add(c(1.0), b.create<math::ErfOp>(loc, mul(x, c(M_SQRT1_2)))));
    Value density = mul(c(1.0 / std::sqrt(2.0 * M_PI)),
                        b.create<math::ExpOp>(loc, mul(c(-0.5), mul(x, x))));
    slope = add(phiCdf, mul(x, density));
  }
  return mul(operands[0], slope);
}
