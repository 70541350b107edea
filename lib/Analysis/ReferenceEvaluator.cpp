//===- ReferenceEvaluator.cpp - Float64 reference semantics of nn ops -----===//
//
// Direct loops, no blocking, no vectorization: the point is to be obviously
// right. Convolution and pooling cover two spatial axes (NCHW).
//
//===----------------------------------------------------------------------===//
#include "Analysis/ReferenceEvaluator.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>
#include <type_traits>

using namespace mlir;
using namespace gpipe;
using llvm::ArrayRef;
using llvm::SmallVector;

int64_t RefTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

RefTensor RefTensor::zeros(ArrayRef<int64_t> shape) {
  RefTensor t;
  t.shape.assign(shape.begin(), shape.end());
  t.data.assign(t.numElements(), 0.0);
  return t;
}

RefTensor gpipe::toRefTensor(DenseElementsAttr attr) {
  RefTensor t = RefTensor::zeros(attr.getType().getShape());
  Type element = attr.getElementType();
  if (isa<FloatType>(element)) {
    int64_t i = 0;
    for (APFloat v : attr.getValues<APFloat>())
      t.data[i++] = v.convertToDouble();
  } else {
    bool isUnsigned = element.isUnsignedInteger() || element.isInteger(1);
    int64_t i = 0;
    for (APInt v : attr.getValues<APInt>())
      // Two casts: `c ? uint64_t : int64_t` would be unsigned, turning -1
      // into 2^64 - 1.
      t.data[i++] = isUnsigned ? static_cast<double>(v.getZExtValue())
                               : static_cast<double>(v.getSExtValue());
  }
  if (attr.isSplat())
    std::fill(t.data.begin(), t.data.end(), t.data.empty() ? 0 : t.data[0]);
  return t;
}

namespace {

SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

/// Calls f(index, linear) for every index of `shape` in row-major order.
void forEachIndex(ArrayRef<int64_t> shape,
                  const std::function<void(ArrayRef<int64_t>, int64_t)> &f) {
  int64_t total = 1;
  for (int64_t d : shape)
    total *= d;
  SmallVector<int64_t> idx(shape.size(), 0);
  for (int64_t linear = 0; linear < total; ++linear) {
    f(idx, linear);
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      if (++idx[i] < shape[i])
        break;
      idx[i] = 0;
    }
  }
}

SmallVector<int64_t> shapeOf(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return SmallVector<int64_t>(t.getShape());
}

/// The element of `t` that NumPy broadcasting maps to `outIdx`.
double broadcastAt(const RefTensor &t, ArrayRef<int64_t> outIdx) {
  int64_t offset = outIdx.size() - t.shape.size(), linear = 0;
  SmallVector<int64_t> strides = stridesOf(t.shape);
  for (size_t i = 0; i < t.shape.size(); ++i)
    linear += (t.shape[i] == 1 ? 0 : outIdx[i + offset]) * strides[i];
  return t.data[linear];
}

RefTensor elementwise(ArrayRef<int64_t> outShape,
                      ArrayRef<const RefTensor *> inputs,
                      const std::function<double(ArrayRef<double>)> &f) {
  RefTensor out = RefTensor::zeros(outShape);
  SmallVector<double> args(inputs.size());
  forEachIndex(outShape, [&](ArrayRef<int64_t> idx, int64_t linear) {
    for (size_t i = 0; i < inputs.size(); ++i)
      args[i] = broadcastAt(*inputs[i], idx);
    out.data[linear] = f(args);
  });
  return out;
}

/// Splits `shape` at `axis` into (outer, size, inner).
void around(ArrayRef<int64_t> shape, int64_t axis, int64_t &outer,
            int64_t &size, int64_t &inner) {
  outer = 1, inner = 1, size = shape[axis];
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
}

int64_t normalizedAxis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

//===----------------------------------------------------------------------===//
// Convolution and pooling over NCHW
//===----------------------------------------------------------------------===//

struct Window {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

Window windowOf(ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations) {
  auto at = [](ArrayRef<int64_t> a, size_t i, int64_t dflt) {
    return i < a.size() ? a[i] : dflt;
  };
  return {kernel[0],           kernel[1],          at(strides, 0, 1),
          at(strides, 1, 1),   at(pads, 0, 0),     at(pads, 1, 0),
          at(dilations, 0, 1), at(dilations, 1, 1)};
}

/// Calls f(input index, weight index, output index) for every product of a
/// grouped convolution whose input position is in bounds.
void forEachConvTap(ArrayRef<int64_t> in, ArrayRef<int64_t> out,
                    ArrayRef<int64_t> weight, const Window &w, int64_t group,
                    const std::function<void(int64_t, int64_t, int64_t)> &f) {
  int64_t perGroupOut = out[1] / group, perGroupIn = weight[1];
  for (int64_t n = 0; n < out[0]; ++n)
    for (int64_t co = 0; co < out[1]; ++co)
      for (int64_t oh = 0; oh < out[2]; ++oh)
        for (int64_t ow = 0; ow < out[3]; ++ow)
          for (int64_t ci = 0; ci < perGroupIn; ++ci)
            for (int64_t kh = 0; kh < w.kh; ++kh)
              for (int64_t kw = 0; kw < w.kw; ++kw) {
                int64_t ih = oh * w.sh - w.ph + kh * w.dh;
                int64_t iw = ow * w.sw - w.pw + kw * w.dw;
                if (ih < 0 || iw < 0 || ih >= in[2] || iw >= in[3])
                  continue;
                int64_t cin = (co / perGroupOut) * perGroupIn + ci;
                int64_t inIdx = ((n * in[1] + cin) * in[2] + ih) * in[3] + iw;
                int64_t wIdx = ((co * perGroupIn + ci) * w.kh + kh) * w.kw + kw;
                int64_t outIdx =
                    ((n * out[1] + co) * out[2] + oh) * out[3] + ow;
                f(inIdx, wIdx, outIdx);
              }
}

/// Visits the in-bounds input positions of each pooling window.
void forEachPoolTap(
    ArrayRef<int64_t> in, ArrayRef<int64_t> out, const Window &w,
    const std::function<void(int64_t outIdx, int64_t inIdx, bool inside)> &f) {
  for (int64_t nc = 0; nc < out[0] * out[1]; ++nc)
    for (int64_t oh = 0; oh < out[2]; ++oh)
      for (int64_t ow = 0; ow < out[3]; ++ow)
        for (int64_t kh = 0; kh < w.kh; ++kh)
          for (int64_t kw = 0; kw < w.kw; ++kw) {
            int64_t ih = oh * w.sh - w.ph + kh * w.dh;
            int64_t iw = ow * w.sw - w.pw + kw * w.dw;
            bool inside = ih >= 0 && iw >= 0 && ih < in[2] && iw < in[3];
            int64_t outIdx = (nc * out[2] + oh) * out[3] + ow;
            f(outIdx, inside ? (nc * in[2] + ih) * in[3] + iw : -1, inside);
          }
}

/// Number of window positions inside the padded input (for count_include_pad)
/// or inside the input.
int64_t windowCount(ArrayRef<int64_t> in, int64_t oh, int64_t ow,
                    const Window &w, bool includePad) {
  int64_t count = 0;
  for (int64_t kh = 0; kh < w.kh; ++kh)
    for (int64_t kw = 0; kw < w.kw; ++kw) {
      int64_t ih = oh * w.sh - w.ph + kh, iw = ow * w.sw - w.pw + kw;
      bool inside = ih >= 0 && iw >= 0 && ih < in[2] && iw < in[3];
      bool inPadded =
          ih < in[2] + w.ph && iw < in[3] + w.pw; // end pads assumed equal
      count += inside || (includePad && inPadded);
    }
  return count;
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Per-channel (axis 1) batch mean and biased variance.
void channelStats(const RefTensor &x, std::vector<double> &mean,
                  std::vector<double> &var);

/// The statistics a batch_norm(_grad) normalizes with: the batch's when
/// training, else its running mean and variance.
void normalizationStats(bool training, const RefTensor &x,
                        const RefTensor &runningMean,
                        const RefTensor &runningVar, std::vector<double> &mean,
                        std::vector<double> &var) {
  if (training) {
    channelStats(x, mean, var);
  } else {
    mean = runningMean.data;
    var = runningVar.data;
  }
}

/// Mean and biased variance of a row of `cols` values.
std::pair<double, double> rowStats(const double *row, int64_t cols) {
  double mean = 0, var = 0;
  for (int64_t c = 0; c < cols; ++c)
    mean += row[c] / cols;
  for (int64_t c = 0; c < cols; ++c)
    var += (row[c] - mean) * (row[c] - mean) / cols;
  return {mean, var};
}

/// log(sum(exp(v))) over `size` values at stride `stride` (the maximum
/// subtracted first, for range).
double logSumExp(const double *v, int64_t size, int64_t stride) {
  double mx = -INFINITY, sum = 0;
  for (int64_t k = 0; k < size; ++k)
    mx = std::max(mx, v[k * stride]);
  for (int64_t k = 0; k < size; ++k)
    sum += std::exp(v[k * stride] - mx);
  return mx + std::log(sum);
}

/// An attention's problems: S stacked [Tq, D] x [Tk, D] products (the
/// leading dimensions), and the full probabilities of problem s, P[i][j] =
/// softmax_j(scale q_i . k_j + mask[i][j]) (keys after i masked out when
/// causal), with each row's log-sum-exp: the direct definition the tiled
/// kernels are checked against.
struct ReferenceAttention {
  const RefTensor &q, &k;
  const RefTensor *mask;
  double scale;
  bool causal;
  int64_t stack, tq, tk, d;

  ReferenceAttention(const RefTensor &q, const RefTensor &k,
                     const RefTensor *mask, double scale, bool causal)
      : q(q), k(k), mask(mask), scale(scale), causal(causal) {
    size_t rank = q.shape.size();
    tq = q.shape[rank - 2];
    d = q.shape[rank - 1];
    tk = k.shape[rank - 2];
    stack = q.numElements() / (tq * d);
  }

  /// The probabilities of problem s ([Tq x Tk]) and each row's log-sum-exp.
  std::vector<double> probabilities(int64_t s, std::vector<double> &lse) const {
    std::vector<double> p(tq * tk);
    SmallVector<int64_t> idx(q.shape.size());
    int64_t rest = s;
    for (size_t a = q.shape.size() - 2; a-- > 0;) {
      idx[a] = rest % q.shape[a];
      rest /= q.shape[a];
    }
    lse.assign(tq, 0);
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t j = 0; j < tk; ++j) {
        double x = 0;
        for (int64_t c = 0; c < d; ++c)
          x += q.data[(s * tq + i) * d + c] * k.data[(s * tk + j) * d + c];
        x *= scale;
        idx[idx.size() - 2] = i;
        idx.back() = j;
        if (mask)
          x += broadcastAt(*mask, idx);
        if (causal && j > i)
          x = -INFINITY;
        p[i * tk + j] = x;
      }
      lse[i] = logSumExp(&p[i * tk], tk, 1);
      for (int64_t j = 0; j < tk; ++j)
        p[i * tk + j] = std::exp(p[i * tk + j] - lse[i]);
    }
    return p;
  }
};

/// Rows of a cross-entropy whose label is not `ignoreIndex`.
int64_t countedRows(const RefTensor &labels, int64_t ignoreIndex) {
  int64_t counted = 0;
  for (double l : labels.data)
    counted += static_cast<int64_t>(l) != ignoreIndex;
  return counted;
}

/// Rows of a layer_norm(_grad): the product of the axes before `axis`.
int64_t layerNormRows(const RefTensor &x, int64_t axis) {
  int64_t rows = 1;
  for (int64_t i = 0; i < axis; ++i)
    rows *= x.shape[i];
  return rows;
}
void channelStats(const RefTensor &x, std::vector<double> &mean,
                  std::vector<double> &var) {
  int64_t outer, channels, inner;
  around(x.shape, 1, outer, channels, inner);
  mean.assign(channels, 0.0);
  var.assign(channels, 0.0);
  double count = static_cast<double>(outer * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i)
        mean[c] += x.data[(o * channels + c) * inner + i] / count;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        double d = x.data[(o * channels + c) * inner + i] - mean[c];
        var[c] += d * d / count;
      }
}

class Evaluator {
public:
  explicit Evaluator(const llvm::StringMap<RefTensor> &parameters)
      : parameters(parameters) {}

  FailureOr<std::vector<RefTensor>> run(func::FuncOp func,
                                        ArrayRef<RefTensor> args) {
    for (auto [arg, value] : llvm::zip(func.getArguments(), args))
      values[arg] = value;
    for (Operation &op : func.front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        std::vector<RefTensor> results;
        for (Value v : ret.getOperands())
          results.push_back(values.lookup(v));
        return results;
      }
      if (failed(evaluate(&op)))
        return failure();
    }
    return func.emitError("no return");
  }

private:
  const RefTensor &in(Value v) { return values[v]; }
  void set(Value v, RefTensor t) { values[v] = std::move(t); }

  LogicalResult unary(Operation *op, const std::function<double(double)> &f) {
    const RefTensor &x = in(op->getOperand(0));
    set(op->getResult(0), elementwise(x.shape, {&x}, [&](ArrayRef<double> a) {
          return f(a[0]);
        }));
    return success();
  }
  LogicalResult binary(Operation *op,
                       const std::function<double(double, double)> &f) {
    const RefTensor &l = in(op->getOperand(0)), &r = in(op->getOperand(1));
    set(op->getResult(0),
        elementwise(shapeOf(op->getResult(0)), {&l, &r},
                    [&](ArrayRef<double> a) { return f(a[0], a[1]); }));
    return success();
  }

  LogicalResult evaluate(Operation *op);

  const llvm::StringMap<RefTensor> &parameters;
  DenseMap<Value, RefTensor> values;
};

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double geluTanh(double x) {
  double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

LogicalResult Evaluator::evaluate(Operation *op) {
  using namespace gpipe::nn;
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](GetParameterOp g) -> LogicalResult {
        auto it = parameters.find(g.getName());
        if (it == parameters.end())
          return g.emitError("no value for parameter ") << g.getName();
        set(g.getResult(), it->second);
        return success();
      })
      .Case([&](ConstantOp c) -> LogicalResult {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense)
          return c.emitError("reference evaluation needs dense constants");
        set(c.getResult(), toRefTensor(dense));
        return success();
      })
      // Element-wise forward ops.
      .Case([&](ReluOp o) -> LogicalResult {
        return unary(o, [](double x) { return x > 0 ? x : 0.0; });
      })
      .Case([&](LeakyReluOp o) -> LogicalResult {
        double a = o.getAlpha().convertToDouble();
        return unary(o, [a](double x) { return x >= 0 ? x : a * x; });
      })
      .Case([&](NegOp o) -> LogicalResult {
        return unary(o, [](double x) { return -x; });
      })
      .Case([&](ClipOp o) -> LogicalResult {
        double lo = o.getMin().convertToDouble(),
               hi = o.getMax().convertToDouble();
        return unary(o,
                     [=](double x) { return std::min(std::max(x, lo), hi); });
      })
      .Case([&](HardSigmoidOp o) -> LogicalResult {
        double a = o.getAlpha().convertToDouble(),
               c = o.getBeta().convertToDouble();
        return unary(o, [=](double x) {
          return std::min(std::max(a * x + c, 0.0), 1.0);
        });
      })
      .Case([&](HardSwishOp o) -> LogicalResult {
        return unary(o, [](double x) {
          return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
        });
      })
      .Case([&](SigmoidOp o) -> LogicalResult {
        return unary(o, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
      })
      .Case([&](TanhOp o) -> LogicalResult {
        return unary(o, [](double x) { return std::tanh(x); });
      })
      .Case([&](ErfOp o) -> LogicalResult {
        return unary(o, [](double x) { return std::erf(x); });
      })
      .Case([&](SqrtOp o) -> LogicalResult {
        return unary(o, [](double x) { return std::sqrt(x); });
      })
      .Case([&](GeluOp o) -> LogicalResult {
        return o.getApproximate() == "tanh" ? unary(o, geluTanh)
                                            : unary(o, gelu);
      })
      .Case([&](DropoutOp o) -> LogicalResult {
        if (o.getTraining() && !o.getRatio().isZero())
          return o.emitError("reference evaluation of random dropout");
        return unary(o, [](double x) { return x; });
      })
      .Case([&](CastOp o) -> LogicalResult {
        return unary(o, [](double x) { return x; });
      })
      .Case([&](AddOp o) -> LogicalResult {
        return binary(o, std::plus<double>());
      })
      .Case([&](SubOp o) -> LogicalResult {
        return binary(o, std::minus<double>());
      })
      .Case([&](MulOp o) -> LogicalResult {
        return binary(o, std::multiplies<double>());
      })
      .Case([&](DivOp o) -> LogicalResult {
        return binary(o, std::divides<double>());
      })
      .Case([&](PowOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return std::pow(a, b); });
      })
      .Case([&](ModOp o) -> LogicalResult {
        if (o.getFmod())
          return binary(o, [](double a, double b) { return std::fmod(a, b); });
        return binary(o, [](double a, double b) {
          double r = std::fmod(a, b);
          return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
        });
      })
      .Case([&](EqualOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a == b); });
      })
      .Case([&](LessOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a < b); });
      })
      .Case([&](LessEqualOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a <= b); });
      })
      .Case([&](GreaterOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a > b); });
      })
      .Case([&](GreaterEqualOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a >= b); });
      })
      .Case([&](AndOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a && b); });
      })
      .Case([&](OrOp o) -> LogicalResult {
        return binary(o, [](double a, double b) { return double(a || b); });
      })
      .Case([&](XorOp o) -> LogicalResult {
        return binary(
            o, [](double a, double b) { return double((a != 0) != (b != 0)); });
      })
      .Case([&](NotOp o) -> LogicalResult {
        return unary(o, [](double x) { return double(x == 0); });
      })
      .Case([&](WhereOp o) -> LogicalResult {
        const RefTensor &c = in(o.getCondition()), &x = in(o.getX()),
                        &y = in(o.getY());
        set(o.getResult(),
            elementwise(shapeOf(o.getResult()), {&c, &x, &y},
                        [](ArrayRef<double> a) { return a[0] ? a[1] : a[2]; }));
        return success();
      })
      .Case([&](BroadcastOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        set(o.getResult(),
            elementwise(o.getShape(), {&x},
                        [](ArrayRef<double> a) { return a[0]; }));
        return success();
      })
      // Element-wise gradient ops.
      .Case([&](ReluGradOp o) -> LogicalResult {
        return binary(o, [](double g, double x) { return x > 0 ? g : 0.0; });
      })
      .Case([&](ClipGradOp o) -> LogicalResult {
        double lo = o.getMin().convertToDouble(),
               hi = o.getMax().convertToDouble();
        return binary(
            o, [=](double g, double x) { return x > lo && x < hi ? g : 0.0; });
      })
      .Case([&](HardSigmoidGradOp o) -> LogicalResult {
        double a = o.getAlpha().convertToDouble(),
               c = o.getBeta().convertToDouble();
        return binary(o, [=](double g, double x) {
          double z = a * x + c;
          return z > 0 && z < 1 ? a * g : 0.0;
        });
      })
      .Case([&](HardSwishGradOp o) -> LogicalResult {
        return binary(o, [](double g, double x) {
          return x < -3 ? 0.0 : x <= 3 ? g * (x / 3 + 0.5) : g;
        });
      })
      .Case([&](LeakyReluGradOp o) -> LogicalResult {
        double a = o.getAlpha().convertToDouble();
        return binary(o, [a](double g, double x) { return x > 0 ? g : a * g; });
      })
      .Case([&](ErfGradOp o) -> LogicalResult {
        return binary(o, [](double g, double x) {
          return g * 2.0 / std::sqrt(M_PI) * std::exp(-x * x);
        });
      })
      .Case([&](GeluGradOp o) -> LogicalResult {
        // Central difference of the forward in long double would be circular;
        // the closed forms, written out again here.
        bool tanhForm = o.getApproximate() == "tanh";
        return binary(o, [tanhForm](double g, double x) {
          if (tanhForm) {
            double k = std::sqrt(2.0 / M_PI), a = 0.044715;
            double t = std::tanh(k * (x + a * x * x * x));
            return g * (0.5 * (1 + t) +
                        0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x));
          }
          double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
          return g * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * pdf);
        });
      })
      // Linear algebra.
      .Case([&](GemmOp o) -> LogicalResult {
        const RefTensor &a = in(o.getA()), &b = in(o.getB());
        bool ta = o.getTransA(), tb = o.getTransB();
        int64_t m = ta ? a.shape[1] : a.shape[0],
                k = ta ? a.shape[0] : a.shape[1];
        int64_t n = tb ? b.shape[0] : b.shape[1];
        RefTensor out = RefTensor::zeros({m, n});
        double alpha = o.getAlpha().convertToDouble(),
               beta = o.getBeta().convertToDouble();
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (int64_t p = 0; p < k; ++p)
              sum += a.data[ta ? p * m + i : i * k + p] *
                     b.data[tb ? j * k + p : p * n + j];
            out.data[i * n + j] = alpha * sum;
          }
        if (o.getC()) {
          const RefTensor &c = in(o.getC());
          forEachIndex(out.shape, [&](ArrayRef<int64_t> idx, int64_t linear) {
            out.data[linear] += beta * broadcastAt(c, idx);
          });
        }
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](MatMulOp o) -> LogicalResult {
        const RefTensor &a = in(o.getLhs()), &b = in(o.getRhs());
        if (a.shape.size() < 2 || b.shape.size() < 2)
          return o.emitError("reference matmul needs rank >= 2");
        SmallVector<int64_t> outShape = shapeOf(o.getResult());
        size_t rank = outShape.size();
        int64_t k = a.shape.back();
        RefTensor out = RefTensor::zeros(outShape);
        // Batch index of an operand: broadcast over its leading axes.
        auto at = [&](const RefTensor &t, ArrayRef<int64_t> idx, int64_t r,
                      int64_t c) {
          SmallVector<int64_t> full(idx.begin(), idx.end());
          full[rank - 2] = r;
          full[rank - 1] = c;
          return broadcastAt(t, full);
        };
        forEachIndex(outShape, [&](ArrayRef<int64_t> idx, int64_t linear) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p)
            sum += at(a, idx, idx[rank - 2], p) * at(b, idx, p, idx[rank - 1]);
          out.data[linear] = sum;
        });
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConvOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput()), &w = in(o.getWeight());
        if (x.shape.size() != 4)
          return o.emitError("reference conv covers 2 spatial axes");
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        Window win = windowOf({w.shape[2], w.shape[3]}, o.getStrides(),
                              o.getPads(), o.getDilations());
        forEachConvTap(x.shape, out.shape, w.shape, win, o.getGroup(),
                       [&](int64_t i, int64_t wi, int64_t oi) {
                         out.data[oi] += x.data[i] * w.data[wi];
                       });
        if (o.getBias()) {
          const RefTensor &b = in(o.getBias());
          int64_t spatial = out.shape[2] * out.shape[3];
          for (int64_t i = 0; i < out.numElements(); ++i)
            out.data[i] += b.data[(i / spatial) % out.shape[1]];
        }
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConvGradInputOp o) -> LogicalResult {
        const RefTensor &g = in(o.getGradOutput()), &w = in(o.getWeight());
        RefTensor out = RefTensor::zeros(shapeOf(o.getGradInput()));
        Window win = windowOf({w.shape[2], w.shape[3]}, o.getStrides(),
                              o.getPads(), o.getDilations());
        forEachConvTap(out.shape, g.shape, w.shape, win, o.getGroup(),
                       [&](int64_t i, int64_t wi, int64_t oi) {
                         out.data[i] += g.data[oi] * w.data[wi];
                       });
        set(o.getGradInput(), std::move(out));
        return success();
      })
      .Case([&](ConvGradWeightOp o) -> LogicalResult {
        const RefTensor &g = in(o.getGradOutput()), &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getGradWeight()));
        Window win = windowOf({out.shape[2], out.shape[3]}, o.getStrides(),
                              o.getPads(), o.getDilations());
        forEachConvTap(x.shape, g.shape, out.shape, win, o.getGroup(),
                       [&](int64_t i, int64_t wi, int64_t oi) {
                         out.data[wi] += g.data[oi] * x.data[i];
                       });
        set(o.getGradWeight(), std::move(out));
        return success();
      })
      // Pooling.
      .Case([&](MaxPoolOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        std::fill(out.data.begin(), out.data.end(), -INFINITY);
        forEachPoolTap(x.shape, out.shape,
                       windowOf(o.getKernelShape(), o.getStrides(), o.getPads(),
                                o.getDilations()),
                       [&](int64_t oi, int64_t i, bool inside) {
                         if (inside)
                           out.data[oi] = std::max(out.data[oi], x.data[i]);
                       });
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](MaxPoolGradOp o) -> LogicalResult {
        // To the first maximum of each window.
        const RefTensor &g = in(o.getGradOutput()), &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(x.shape);
        std::vector<int64_t> argmax(g.numElements(), -1);
        forEachPoolTap(x.shape, g.shape,
                       windowOf(o.getKernelShape(), o.getStrides(), o.getPads(),
                                o.getDilations()),
                       [&](int64_t oi, int64_t i, bool inside) {
                         if (inside &&
                             (argmax[oi] < 0 || x.data[i] > x.data[argmax[oi]]))
                           argmax[oi] = i;
                       });
        for (int64_t oi = 0; oi < g.numElements(); ++oi)
          if (argmax[oi] >= 0)
            out.data[argmax[oi]] += g.data[oi];
        set(o.getGradInput(), std::move(out));
        return success();
      })
      .Case([&](AvgPoolOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        Window win =
            windowOf(o.getKernelShape(), o.getStrides(), o.getPads(), {});
        forEachPoolTap(x.shape, out.shape, win,
                       [&](int64_t oi, int64_t i, bool inside) {
                         if (inside)
                           out.data[oi] += x.data[i];
                       });
        int64_t plane = out.shape[2] * out.shape[3];
        for (int64_t oi = 0; oi < out.numElements(); ++oi)
          out.data[oi] /=
              windowCount(x.shape, (oi % plane) / out.shape[3],
                          oi % out.shape[3], win, o.getCountIncludePad());
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](AvgPoolGradOp o) -> LogicalResult {
        const RefTensor &g = in(o.getGradOutput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getGradInput()));
        Window win =
            windowOf(o.getKernelShape(), o.getStrides(), o.getPads(), {});
        int64_t plane = g.shape[2] * g.shape[3];
        forEachPoolTap(
            out.shape, g.shape, win, [&](int64_t oi, int64_t i, bool inside) {
              if (!inside)
                return;
              int64_t count =
                  windowCount(out.shape, (oi % plane) / g.shape[3],
                              oi % g.shape[3], win, o.getCountIncludePad());
              out.data[i] += g.data[oi] / count;
            });
        set(o.getGradInput(), std::move(out));
        return success();
      })
      .Case([&](GlobalAvgPoolOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        int64_t spatial = x.numElements() / out.numElements();
        for (int64_t i = 0; i < x.numElements(); ++i)
          out.data[i / spatial] += x.data[i] / spatial;
        set(o.getResult(), std::move(out));
        return success();
      })
      // Normalization and softmax.
      .Case([&](BatchNormOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput()), &s = in(o.getScale()),
                        &b = in(o.getBias());
        std::vector<double> mean, var;
        normalizationStats(o.getTraining(), x, in(o.getMean()), in(o.getVar()),
                           mean, var);
        int64_t outer, channels, inner;
        around(x.shape, 1, outer, channels, inner);
        RefTensor out = RefTensor::zeros(x.shape);
        double eps = o.getEpsilon().convertToDouble();
        for (int64_t i = 0; i < x.numElements(); ++i) {
          int64_t c = (i / inner) % channels;
          out.data[i] =
              (x.data[i] - mean[c]) / std::sqrt(var[c] + eps) * s.data[c] +
              b.data[c];
        }
        set(o.getOutput(), std::move(out));
        RefTensor savedMean = RefTensor::zeros({channels}),
                  savedVar = RefTensor::zeros({channels});
        savedMean.data = mean;
        savedVar.data = var;
        set(o.getSavedMean(), std::move(savedMean));
        set(o.getSavedVar(), std::move(savedVar));
        return success();
      })
      .Case([&](BatchNormGradOp o) -> LogicalResult {
        const RefTensor &g = in(o.getGradOutput()), &x = in(o.getInput()),
                        &s = in(o.getScale());
        // The statistics the forward normalized with (its saved ones).
        std::vector<double> mean = in(o.getMean()).data,
                            var = in(o.getVar()).data;
        int64_t outer, channels, inner;
        around(x.shape, 1, outer, channels, inner);
        double eps = o.getEpsilon().convertToDouble();
        double count = static_cast<double>(outer * inner);
        std::vector<double> sumG(channels, 0.0), sumGX(channels, 0.0);
        auto xhat = [&](int64_t i, int64_t c) {
          return (x.data[i] - mean[c]) / std::sqrt(var[c] + eps);
        };
        for (int64_t i = 0; i < x.numElements(); ++i) {
          int64_t c = (i / inner) % channels;
          sumG[c] += g.data[i];
          sumGX[c] += g.data[i] * xhat(i, c);
        }
        RefTensor dx = RefTensor::zeros(x.shape);
        for (int64_t i = 0; i < x.numElements(); ++i) {
          int64_t c = (i / inner) % channels;
          double k = s.data[c] / std::sqrt(var[c] + eps);
          dx.data[i] = o.getTraining() ? k * (g.data[i] - sumG[c] / count -
                                              xhat(i, c) * sumGX[c] / count)
                                       : k * g.data[i];
        }
        RefTensor ds = RefTensor::zeros({channels}),
                  db = RefTensor::zeros({channels});
        ds.data = sumGX;
        db.data = sumG;
        set(o.getGradInput(), std::move(dx));
        set(o.getGradScale(), std::move(ds));
        set(o.getGradBias(), std::move(db));
        return success();
      })
      .Case([&](LayerNormOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput()), &s = in(o.getScale());
        int64_t rows =
            layerNormRows(x, normalizedAxis(o.getAxis(), x.shape.size()));
        int64_t cols = x.numElements() / rows;
        double eps = o.getEpsilon().convertToDouble();
        RefTensor out = RefTensor::zeros(x.shape);
        for (int64_t r = 0; r < rows; ++r) {
          const double *row = &x.data[r * cols];
          auto [mean, var] = rowStats(row, cols);
          for (int64_t c = 0; c < cols; ++c)
            out.data[r * cols + c] =
                (row[c] - mean) / std::sqrt(var + eps) * s.data[c] +
                (o.getBias() ? in(o.getBias()).data[c] : 0.0);
        }
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](LayerNormGradOp o) -> LogicalResult {
        const RefTensor &g = in(o.getGradOutput()), &x = in(o.getInput()),
                        &s = in(o.getScale());
        int64_t rows =
            layerNormRows(x, normalizedAxis(o.getAxis(), x.shape.size()));
        int64_t cols = x.numElements() / rows;
        double eps = o.getEpsilon().convertToDouble();
        RefTensor dx = RefTensor::zeros(x.shape);
        RefTensor ds = RefTensor::zeros(s.shape),
                  db = RefTensor::zeros(s.shape);
        for (int64_t r = 0; r < rows; ++r) {
          const double *row = &x.data[r * cols], *gr = &g.data[r * cols];
          auto [mean, var] = rowStats(row, cols);
          double inv = 1.0 / std::sqrt(var + eps);
          // With h = g * scale: dx = inv * (h - mean(h) - xhat * mean(h xhat)).
          double meanH = 0, meanHX = 0;
          for (int64_t c = 0; c < cols; ++c) {
            double xhat = (row[c] - mean) * inv, h = gr[c] * s.data[c];
            meanH += h / cols;
            meanHX += h * xhat / cols;
            ds.data[c] += gr[c] * xhat;
            db.data[c] += gr[c];
          }
          for (int64_t c = 0; c < cols; ++c) {
            double xhat = (row[c] - mean) * inv;
            dx.data[r * cols + c] =
                inv * (gr[c] * s.data[c] - meanH - xhat * meanHX);
          }
        }
        set(o.getGradInput(), std::move(dx));
        set(o.getGradScale(), std::move(ds));
        set(o.getGradBias(), std::move(db));
        return success();
      })
      .Case([&](CumSumOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        int64_t outer, size, inner;
        around(x.shape, normalizedAxis(o.getAxis(), x.shape.size()), outer,
               size, inner);
        RefTensor out = RefTensor::zeros(x.shape);
        bool reverse = o.getReverse(), exclusive = o.getExclusive();
        for (int64_t a = 0; a < outer; ++a)
          for (int64_t b = 0; b < inner; ++b) {
            double sum = 0.0;
            for (int64_t j = 0; j < size; ++j) {
              int64_t at =
                  (a * size + (reverse ? size - 1 - j : j)) * inner + b;
              if (exclusive)
                out.data[at] = sum;
              sum += x.data[at];
              if (!exclusive)
                out.data[at] = sum;
            }
          }
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case<SoftmaxOp, LogSoftmaxOp>([&](auto o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        int64_t outer, size, inner;
        around(x.shape, normalizedAxis(o.getAxis(), x.shape.size()), outer,
               size, inner);
        RefTensor out = RefTensor::zeros(x.shape);
        bool log = isa<LogSoftmaxOp>(o.getOperation());
        for (int64_t a = 0; a < outer; ++a)
          for (int64_t b = 0; b < inner; ++b) {
            auto at = [&](int64_t k) { return (a * size + k) * inner + b; };
            double lse = logSumExp(&x.data[at(0)], size, inner);
            for (int64_t k = 0; k < size; ++k)
              out.data[at(k)] =
                  log ? x.data[at(k)] - lse : std::exp(x.data[at(k)] - lse);
          }
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case<SoftmaxGradOp, LogSoftmaxGradOp>([&](auto o) -> LogicalResult {
        const RefTensor &g = in(o.getGradOutput()), &y = in(o.getOutput());
        int64_t outer, size, inner;
        around(y.shape, normalizedAxis(o.getAxis(), y.shape.size()), outer,
               size, inner);
        bool log = isa<LogSoftmaxGradOp>(o.getOperation());
        RefTensor dx = RefTensor::zeros(y.shape);
        for (int64_t a = 0; a < outer; ++a)
          for (int64_t b = 0; b < inner; ++b) {
            auto at = [&](int64_t k) { return (a * size + k) * inner + b; };
            double dot = 0;
            for (int64_t k = 0; k < size; ++k)
              dot += log ? g.data[at(k)] : g.data[at(k)] * y.data[at(k)];
            for (int64_t k = 0; k < size; ++k)
              dx.data[at(k)] =
                  log ? g.data[at(k)] - std::exp(y.data[at(k)]) * dot
                      : y.data[at(k)] * (g.data[at(k)] - dot);
          }
        set(o.getGradInput(), std::move(dx));
        return success();
      })
      .Case([&](AttentionOp o) -> LogicalResult {
        if (o.isRandom())
          return o.emitError("reference evaluation of attention with dropout");
        const RefTensor &v = in(o.getValue());
        const RefTensor *mask = o.getMask() ? &in(o.getMask()) : nullptr;
        ReferenceAttention att(in(o.getQuery()), in(o.getKey()), mask,
                               o.getScale().convertToDouble(), o.getCausal());
        int64_t dv = v.shape.back();
        RefTensor out = RefTensor::zeros(shapeOf(o.getOutput()));
        RefTensor lse = RefTensor::zeros(shapeOf(o.getLogsumexp()));
        for (int64_t s = 0; s < att.stack; ++s) {
          std::vector<double> rows;
          std::vector<double> p = att.probabilities(s, rows);
          for (int64_t i = 0; i < att.tq; ++i) {
            lse.data[s * att.tq + i] = rows[i];
            for (int64_t c = 0; c < dv; ++c) {
              double sum = 0;
              for (int64_t j = 0; j < att.tk; ++j)
                sum += p[i * att.tk + j] * v.data[(s * att.tk + j) * dv + c];
              out.data[(s * att.tq + i) * dv + c] = sum;
            }
          }
        }
        set(o.getOutput(), std::move(out));
        set(o.getLogsumexp(), std::move(lse));
        return success();
      })
      .Case([&](AttentionGradOp o) -> LogicalResult {
        if (!o.getDropoutRatio().isZero())
          return o.emitError("reference evaluation of attention with dropout");
        // dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) scale,
        // dQ = dS K, dK = dS^T Q, from the full P.
        const RefTensor &g = in(o.getGradOutput()), &q = in(o.getQuery()),
                        &k = in(o.getKey()), &v = in(o.getValue());
        const RefTensor *mask = o.getMask() ? &in(o.getMask()) : nullptr;
        double scale = o.getScale().convertToDouble();
        ReferenceAttention att(q, k, mask, scale, o.getCausal());
        int64_t tq = att.tq, tk = att.tk, d = att.d, dv = v.shape.back();
        RefTensor dq = RefTensor::zeros(q.shape),
                  dk = RefTensor::zeros(k.shape),
                  dvT = RefTensor::zeros(v.shape);
        for (int64_t s = 0; s < att.stack; ++s) {
          std::vector<double> rows;
          std::vector<double> p = att.probabilities(s, rows);
          std::vector<double> dp(tq * tk);
          for (int64_t i = 0; i < tq; ++i)
            for (int64_t j = 0; j < tk; ++j) {
              double x = 0;
              for (int64_t c = 0; c < dv; ++c)
                x += g.data[(s * tq + i) * dv + c] *
                     v.data[(s * tk + j) * dv + c];
              dp[i * tk + j] = x;
            }
          for (int64_t i = 0; i < tq; ++i) {
            double dot = 0;
            for (int64_t j = 0; j < tk; ++j)
              dot += p[i * tk + j] * dp[i * tk + j];
            for (int64_t j = 0; j < tk; ++j) {
              double ds = p[i * tk + j] * (dp[i * tk + j] - dot) * scale;
              for (int64_t c = 0; c < d; ++c) {
                dq.data[(s * tq + i) * d + c] +=
                    ds * k.data[(s * tk + j) * d + c];
                dk.data[(s * tk + j) * d + c] +=
                    ds * q.data[(s * tq + i) * d + c];
              }
              for (int64_t c = 0; c < dv; ++c)
                dvT.data[(s * tk + j) * dv + c] +=
                    p[i * tk + j] * g.data[(s * tq + i) * dv + c];
            }
          }
        }
        set(o.getGradQuery(), std::move(dq));
        set(o.getGradKey(), std::move(dk));
        set(o.getGradValue(), std::move(dvT));
        return success();
      })
      .Case([&](SoftmaxCrossEntropyOp o) -> LogicalResult {
        const RefTensor &x = in(o.getLogits()), &l = in(o.getLabels());
        int64_t n = x.shape[0], c = x.shape[1],
                counted = countedRows(l, o.getIgnoreIndex());
        double loss = 0;
        for (int64_t i = 0; i < n; ++i) {
          int64_t label = static_cast<int64_t>(l.data[i]);
          if (label == static_cast<int64_t>(o.getIgnoreIndex()))
            continue;
          double lse = logSumExp(&x.data[i * c], c, 1);
          loss += -(x.data[i * c + label] - lse) / counted;
        }
        RefTensor out = RefTensor::zeros({});
        out.data[0] = loss;
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](SoftmaxCrossEntropyGradOp o) -> LogicalResult {
        const RefTensor &gl = in(o.getGradLoss()), &x = in(o.getLogits()),
                        &l = in(o.getLabels());
        int64_t n = x.shape[0], c = x.shape[1],
                counted = countedRows(l, o.getIgnoreIndex());
        RefTensor dx = RefTensor::zeros(x.shape);
        for (int64_t i = 0; i < n; ++i) {
          if (static_cast<int64_t>(l.data[i]) ==
              static_cast<int64_t>(o.getIgnoreIndex()))
            continue;
          double lse = logSumExp(&x.data[i * c], c, 1);
          for (int64_t k = 0; k < c; ++k)
            dx.data[i * c + k] =
                gl.data[0] *
                (std::exp(x.data[i * c + k] - lse) -
                 (k == static_cast<int64_t>(l.data[i]) ? 1.0 : 0.0)) /
                counted;
        }
        set(o.getGradLogits(), std::move(dx));
        return success();
      })
      // Data movement and reductions.
      .Case([&](ReshapeOp o) -> LogicalResult {
        RefTensor t = in(o.getInput());
        t.shape = shapeOf(o.getResult());
        set(o.getResult(), std::move(t));
        return success();
      })
      .Case([&](TransposeOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        SmallVector<int64_t> xs = stridesOf(x.shape);
        ArrayRef<int64_t> perm = o.getPerm();
        forEachIndex(out.shape, [&](ArrayRef<int64_t> idx, int64_t linear) {
          int64_t src = 0;
          for (size_t i = 0; i < perm.size(); ++i)
            src += idx[i] * xs[perm[i]];
          out.data[linear] = x.data[src];
        });
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](SliceOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        SmallVector<int64_t> xs = stridesOf(x.shape);
        forEachIndex(out.shape, [&](ArrayRef<int64_t> idx, int64_t linear) {
          int64_t src = 0;
          for (size_t i = 0; i < idx.size(); ++i)
            src += (o.getStarts()[i] + idx[i] * o.getSteps()[i]) * xs[i];
          out.data[linear] = x.data[src];
        });
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](PadOp o) -> LogicalResult {
        if (o.getMode() != "constant")
          return o.emitError("reference pad covers constant mode only");
        const RefTensor &x = in(o.getInput());
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        std::fill(out.data.begin(), out.data.end(),
                  o.getValue().convertToDouble());
        SmallVector<int64_t> os = stridesOf(out.shape);
        ArrayRef<int64_t> pads = o.getPads();
        forEachIndex(x.shape, [&](ArrayRef<int64_t> idx, int64_t linear) {
          int64_t dst = 0;
          for (size_t i = 0; i < idx.size(); ++i) {
            int64_t at = idx[i] + pads[i];
            if (at < 0 || at >= out.shape[i])
              return;
            dst += at * os[i];
          }
          out.data[dst] = x.data[linear];
        });
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case([&](ConcatOp o) -> LogicalResult {
        RefTensor out = RefTensor::zeros(shapeOf(o.getResult()));
        int64_t axis = normalizedAxis(o.getAxis(), out.shape.size());
        int64_t outer, size, inner, offset = 0;
        around(out.shape, axis, outer, size, inner);
        for (Value v : o.getInputs()) {
          const RefTensor &x = in(v);
          int64_t piece = x.shape[axis];
          for (int64_t a = 0; a < outer; ++a)
            for (int64_t k = 0; k < piece * inner; ++k)
              out.data[(a * size + offset) * inner + k] =
                  x.data[a * piece * inner + k];
          offset += piece;
        }
        set(o.getResult(), std::move(out));
        return success();
      })
      .Case<GatherOp, GatherGradOp>([&](auto o) -> LogicalResult {
        // out[pre, i..., post] = data[pre, indices[i...], post], or for the
        // gradient its transpose: grad_data[pre, indices[i...], post] +=
        // grad[pre, i..., post].
        constexpr bool grad = std::is_same_v<decltype(o), GatherGradOp>;
        const RefTensor &x = in(o->getOperand(0));
        const RefTensor &indices = in(o->getOperand(1));
        SmallVector<int64_t> dataShape =
            grad ? shapeOf(o->getResult(0)) : SmallVector<int64_t>(x.shape);
        int64_t axis = normalizedAxis(o.getAxis(), dataShape.size());
        int64_t indexRank = indices.shape.size();
        SmallVector<int64_t> ds = stridesOf(dataShape),
                             is = stridesOf(indices.shape);
        RefTensor out = RefTensor::zeros(shapeOf(o->getResult(0)));
        const RefTensor &gathered = grad ? x : out;

        forEachIndex(gathered.shape,
                     [&](ArrayRef<int64_t> idx, int64_t linear) {
                       int64_t at = 0;
                       for (int64_t k = 0; k < indexRank; ++k)
                         at += idx[axis + k] * is[k];
                       auto i = static_cast<int64_t>(indices.data[at]);
                       if (i < 0)
                         i += dataShape[axis];
                       int64_t src = i * ds[axis];
                       for (int64_t k = 0; k < axis; ++k)
                         src += idx[k] * ds[k];
                       for (size_t k = axis + indexRank; k < idx.size(); ++k)
                         src += idx[k] * ds[k - indexRank + 1];
                       if (grad)
                         out.data[src] += x.data[linear];
                       else
                         out.data[linear] = x.data[src];
                     });
        set(o->getResult(0), std::move(out));
        return success();
      })
      .Case([&](SplitOp o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        int64_t axis = normalizedAxis(o.getAxis(), x.shape.size());
        int64_t outer, size, inner, offset = 0;
        around(x.shape, axis, outer, size, inner);
        for (Value r : o.getOutputs()) {
          RefTensor out = RefTensor::zeros(shapeOf(r));
          int64_t piece = out.shape[axis];
          for (int64_t a = 0; a < outer; ++a)
            for (int64_t k = 0; k < piece * inner; ++k)
              out.data[a * piece * inner + k] =
                  x.data[(a * size + offset) * inner + k];
          offset += piece;
          set(r, std::move(out));
        }
        return success();
      })
      .Case<ReduceSumOp, ReduceMeanOp>([&](auto o) -> LogicalResult {
        const RefTensor &x = in(o.getInput());
        ArrayRef<int64_t> axes = o.getAxes();
        SmallVector<int64_t> kept(x.shape);
        int64_t count = 1;
        for (int64_t a : axes) {
          count *= kept[a];
          kept[a] = 1;
        }
        RefTensor out = RefTensor::zeros(kept);
        SmallVector<int64_t> ks = stridesOf(kept);
        bool mean = isa<ReduceMeanOp>(o.getOperation());
        forEachIndex(x.shape, [&](ArrayRef<int64_t> idx, int64_t linear) {
          int64_t dst = 0;
          for (size_t i = 0; i < idx.size(); ++i)
            dst += (kept[i] == 1 ? 0 : idx[i]) * ks[i];
          out.data[dst] += mean ? x.data[linear] / count : x.data[linear];
        });
        out.shape = shapeOf(o.getResult());
        set(o.getResult(), std::move(out));
        return success();
      })
      .Default([](Operation *op) -> LogicalResult {
        return op->emitError("'")
               << op->getName() << "' has no reference semantics";
      });
}

} // namespace

FailureOr<std::vector<RefTensor>>
gpipe::evaluateReference(func::FuncOp func, ArrayRef<RefTensor> args,
                         const llvm::StringMap<RefTensor> &parameters) {
  Evaluator evaluator(parameters);
  return evaluator.run(func, args);
}
