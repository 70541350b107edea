//===- OpsRecurrent.cpp - Importers of LSTM, GRU and RNN ------------------===//
//
// A recurrent layer unrolled over its static sequence into the ops autodiff
// and the pipeline already know: the input's product with every gate's
// weights for all time steps at once (one Gemm, the biases added there),
// then per time step the hidden state's product with the recurrent weights
// and the gates' element-wise arithmetic. Each direction of a
// bidirectional layer is one such chain; Y stacks the hidden states of
// every step, Y_h (Y_c) holds the last.
//
//===----------------------------------------------------------------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

enum class Cell { LSTM, GRU, RNN };

/// The ops of one recurrent node, each a verified op at the node.
class Unroller {
public:
  explicit Unroller(GraphImporter &g) : g(g), b(g.getBuilder()) {}

  FailureOr<Value> slice(Value v, int64_t axis, int64_t begin, int64_t end) {
    ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
    SmallVector<int64_t> starts(shape.size(), 0), ends(shape),
        steps(shape.size(), 1);
    starts[axis] = begin;
    ends[axis] = end;
    return g.createValue<nn::SliceOp>(
        {v}, {g.named("starts", b.getDenseI64ArrayAttr(starts)),
              g.named("ends", b.getDenseI64ArrayAttr(ends)),
              g.named("steps", b.getDenseI64ArrayAttr(steps))});
  }
  FailureOr<Value> reshape(Value v, ArrayRef<int64_t> shape) {
    return reshapeTo(g, v, shape);
  }
  FailureOr<Value> transpose(Value v, ArrayRef<int64_t> perm) {
    return g.createValue<nn::TransposeOp>(
        {v}, {g.named("perm", b.getDenseI64ArrayAttr(perm))});
  }
  FailureOr<Value> concat(ValueRange values, int64_t axis) {
    if (values.size() == 1)
      return values.front();
    return g.createValue<nn::ConcatOp>(
        values, {g.named("axis", b.getI64IntegerAttr(axis))});
  }
  /// a b^T (+ c per column).
  FailureOr<Value> gemmTransB(Value a, Value bMatrix, std::optional<Value> c) {
    SmallVector<Value> operands{a, bMatrix};
    if (c)
      operands.push_back(*c);
    return g.createValue<nn::GemmOp>(operands,
                                     {g.named("alpha", b.getF32FloatAttr(1.0f)),
                                      g.named("beta", b.getF32FloatAttr(1.0f)),
                                      g.named("trans_a", b.getBoolAttr(false)),
                                      g.named("trans_b", b.getBoolAttr(true))});
  }
  template <typename OpTy> FailureOr<Value> binary(Value x, Value y) {
    return g.createValue<OpTy>({x, y});
  }
  FailureOr<Value> activation(StringRef name, Value x) {
    if (name == "Sigmoid")
      return g.createValue<nn::SigmoidOp>({x});
    if (name == "Tanh")
      return g.createValue<nn::TanhOp>({x});
    return g.createValue<nn::ReluOp>({x}); // checked: Relu
  }

private:
  GraphImporter &g;
  Builder &b;
};

#define TRY(var, expr)                                                         \
  auto var##OrFailure = (expr);                                                \
  if (failed(var##OrFailure))                                                  \
    return failure();                                                          \
  Value var = *var##OrFailure;

/// The activations of each direction (f, g[, h] of the ONNX formulas);
/// Sigmoid, Tanh and Relu without alpha or beta.
FailureOr<SmallVector<std::string>> readActivations(GraphImporter &g, Cell cell,
                                                    int64_t dirs) {
  SmallVector<std::string> defaults;
  if (cell == Cell::LSTM)
    defaults = {"Sigmoid", "Tanh", "Tanh"};
  else if (cell == Cell::GRU)
    defaults = {"Sigmoid", "Tanh"};
  else
    defaults = {"Tanh"};
  if (g.hasAttr("activation_alpha") || g.hasAttr("activation_beta"))
    return g.error() << "activation_alpha and activation_beta are not "
                        "implemented yet";
  SmallVector<std::string> out;
  const onnx::AttributeProto *a = g.attr("activations");
  if (!a) {
    for (int64_t d = 0; d < dirs; ++d)
      out.append(defaults.begin(), defaults.end());
    return out;
  }
  if (a->strings_size() != static_cast<int>(defaults.size() * dirs))
    return g.error() << "'activations' has " << a->strings_size()
                     << " entries, expected " << defaults.size() * dirs;
  for (const std::string &name : a->strings()) {
    if (name != "Sigmoid" && name != "Tanh" && name != "Relu")
      return g.error() << "activation '" << name
                       << "' is not implemented yet (Sigmoid, Tanh, Relu)";
    out.push_back(name);
  }
  return out;
}

LogicalResult importRecurrent(GraphImporter &g, Cell cell) {
  SmallVector<StringRef> known{
      "activation_alpha", "activation_beta", "activations", "clip",
      "direction",        "hidden_size",     "layout"};
  if (cell == Cell::LSTM)
    known.push_back("input_forget");
  if (cell == Cell::GRU)
    known.push_back("linear_before_reset");
  if (failed(g.checkAttrs(known)))
    return failure();
  int64_t gates = cell == Cell::LSTM ? 4 : cell == Cell::GRU ? 3 : 1;
  if (g.hasAttr("clip"))
    return g.error() << "'clip' is not implemented yet";
  if (g.intAttr("input_forget", 0) != 0)
    return g.error() << "input_forget is not implemented yet";
  std::string direction = g.stringAttr("direction", "forward");
  if (direction != "forward" && direction != "reverse" &&
      direction != "bidirectional")
    return g.error() << "direction '" << direction
                     << "' is not one of forward, reverse, bidirectional";
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  int64_t layout = g.intAttr("layout", 0);
  if (layout != 0 && layout != 1)
    return g.error() << "layout " << layout << " is not 0 or 1";
  bool linearBeforeReset = g.intAttr("linear_before_reset", 0) != 0;
  auto activations = readActivations(g, cell, dirs);
  if (failed(activations) || g.failed())
    return failure();
  int64_t perDir = static_cast<int64_t>(activations->size()) / dirs;

  auto xType = g.inputType(0), wType = g.inputType(1), rType = g.inputType(2);
  if (failed(xType) || failed(wType) || failed(rType))
    return failure();
  if (xType->getRank() != 3)
    return g.error() << "X " << *xType << " must have rank 3";
  int64_t seq = xType->getDimSize(layout == 0 ? 0 : 1);
  int64_t batch = xType->getDimSize(layout == 0 ? 1 : 0);
  int64_t features = xType->getDimSize(2);
  int64_t hidden = g.intAttr("hidden_size",
                             rType->getRank() == 3 ? rType->getDimSize(2) : -1);
  int64_t gh = gates * hidden;
  auto expect = [&](RankedTensorType t, ArrayRef<int64_t> shape,
                    StringRef what) -> LogicalResult {
    if (t.getShape() == shape)
      return success();
    auto diag = g.error() << what << " " << t << " must have shape [";
    llvm::interleaveComma(shape, diag);
    return diag << "]";
  };
  if (failed(expect(*wType, {dirs, gh, features}, "W")) ||
      failed(expect(*rType, {dirs, gh, hidden}, "R")))
    return failure();
  if (seq < 1)
    return g.error() << "X " << *xType << " has no time steps";
  if (g.hasInput(4)) {
    auto lens = g.requireConstant(4, "sequence_lens");
    if (failed(lens))
      return failure();
    for (int64_t len : (*lens)->toInts())
      if (len != seq)
        return g.error() << "sequence_lens other than the whole sequence ("
                         << seq << ") are not implemented yet";
  }
  std::optional<Value> peepholes;
  if (cell == Cell::LSTM && g.hasInput(7)) {
    auto pType = g.inputType(7);
    if (failed(pType) ||
        failed(expect(*pType, {dirs, 3 * hidden}, "P (peepholes)")))
      return failure();
    auto v = g.input(7);
    if (failed(v))
      return failure();
    peepholes = *v;
  }

  Unroller u(g);
  auto xValue = g.input(0);
  auto wValue = g.input(1);
  auto rValue = g.input(2);
  if (failed(xValue) || failed(wValue) || failed(rValue))
    return failure();
  Value x = *xValue;
  // [T, B, I], then [T * B, I] for the input's product with all gates.
  if (layout == 1) {
    TRY(t, u.transpose(x, {1, 0, 2}));
    x = t;
  }
  TRY(rows, u.reshape(x, {seq * batch, features}));

  // Zero initial states are no state: the first step's recurrent terms
  // vanish (and no constant carries the batch).
  auto initial = [&](size_t i) -> FailureOr<std::optional<Value>> {
    if (!g.hasInput(i))
      return std::optional<Value>();
    if (const ConstTensor *c = g.constantInput(i)) {
      bool zero = true;
      for (int64_t e = 0; e < c->numElements() && zero; ++e)
        zero = c->floatAt(e) == 0;
      if (zero)
        return std::optional<Value>();
    }
    auto type = g.inputType(i);
    if (failed(type) || failed(expect(*type, {dirs, batch, hidden},
                                      i == 5 ? "initial_h" : "initial_c")))
      return failure();
    auto v = g.input(i);
    if (failed(v))
      return failure();
    return std::optional<Value>(*v);
  };
  auto initialH = initial(5);
  auto initialC = cell == Cell::LSTM
                      ? initial(6)
                      : FailureOr<std::optional<Value>>(std::optional<Value>());
  if (failed(initialH) || failed(initialC))
    return failure();
  std::optional<Value> bias;
  if (g.hasInput(3)) {
    auto bType = g.inputType(3);
    if (failed(bType) || failed(expect(*bType, {dirs, 2 * gh}, "B")))
      return failure();
    auto v = g.input(3);
    if (failed(v))
      return failure();
    bias = *v;
  }

  SmallVector<Value> ys, lastH, lastC;
  for (int64_t d = 0; d < dirs; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    auto ofDirection = [&](Value v,
                           ArrayRef<int64_t> shape) -> FailureOr<Value> {
      auto part = u.slice(v, 0, d, d + 1);
      if (failed(part))
        return failure();
      return u.reshape(*part, shape);
    };
    TRY(w, ofDirection(*wValue, {gh, features}));
    TRY(r, ofDirection(*rValue, {gh, hidden}));
    // The biases on the input's product: Wb + Rb, except a GRU's Rbh reset
    // with the hidden state's product (linear_before_reset).
    std::optional<Value> inputBias, resetBias;
    if (bias) {
      TRY(both, ofDirection(*bias, {2 * gh}));
      TRY(wb, u.slice(both, 0, 0, gh));
      TRY(rb, u.slice(both, 0, gh, 2 * gh));
      if (cell == Cell::GRU && linearBeforeReset) {
        TRY(rbZr, u.slice(rb, 0, 0, 2 * hidden));
        TRY(rbH, u.slice(rb, 0, 2 * hidden, gh));
        TRY(wbZr, u.slice(wb, 0, 0, 2 * hidden));
        TRY(wbH, u.slice(wb, 0, 2 * hidden, gh));
        TRY(zr, u.binary<nn::AddOp>(wbZr, rbZr));
        TRY(sum, u.concat({zr, wbH}, 0));
        inputBias = sum;
        resetBias = rbH;
      } else {
        TRY(sum, u.binary<nn::AddOp>(wb, rb));
        inputBias = sum;
      }
    }
    TRY(projected, u.gemmTransB(rows, w, inputBias));
    TRY(byStep, u.reshape(projected, {seq, batch, gh}));
    std::optional<Value> h, c;
    if (*initialH) {
      TRY(h0, ofDirection(**initialH, {batch, hidden}));
      h = h0;
    }
    if (*initialC) {
      TRY(c0, ofDirection(**initialC, {batch, hidden}));
      c = c0;
    }
    // GRU (linear_before_reset = 0) multiplies r * H by Rh alone.
    std::optional<Value> rh;
    if (cell == Cell::GRU && !linearBeforeReset) {
      TRY(part, u.slice(r, 0, 2 * hidden, gh));
      rh = part;
    }
    // Peepholes i, o, f: each a vector over the hidden units.
    SmallVector<Value> peep;
    if (peepholes) {
      TRY(all, ofDirection(*peepholes, {3 * hidden}));
      for (int64_t k = 0; k < 3; ++k) {
        TRY(part, u.slice(all, 0, k * hidden, (k + 1) * hidden));
        peep.push_back(part);
      }
    }
    // pre + P * state, where there are peepholes and a state.
    auto peephole = [&](Value pre, int64_t k,
                        std::optional<Value> state) -> FailureOr<Value> {
      if (peep.empty() || !state)
        return pre;
      auto term = u.binary<nn::MulOp>(peep[k], *state);
      if (failed(term))
        return failure();
      return u.binary<nn::AddOp>(pre, *term);
    };
    ArrayRef<std::string> act =
        ArrayRef<std::string>(*activations).slice(d * perDir, perDir);
    SmallVector<Value> steps(seq);
    for (int64_t i = 0; i < seq; ++i) {
      int64_t t = reverse ? seq - 1 - i : i;
      TRY(xtSlice, u.slice(byStep, 0, t, t + 1));
      TRY(xt, u.reshape(xtSlice, {batch, gh}));
      auto gate = [&](Value v, int64_t k) {
        return u.slice(v, 1, k * hidden, (k + 1) * hidden);
      };
      // The hidden state's product with the recurrent weights (all gates;
      // a GRU without linear_before_reset only z and r).
      std::optional<Value> recurrent;
      if (h) {
        Value weights = r;
        if (rh) {
          TRY(zr, u.slice(r, 0, 0, 2 * hidden));
          weights = zr;
        }
        TRY(product, u.gemmTransB(*h, weights, std::nullopt));
        recurrent = product;
      }
      auto withRecurrent = [&](Value v, int64_t k) -> FailureOr<Value> {
        auto part = gate(v, k);
        if (failed(part) || !recurrent)
          return part;
        auto rPart = gate(*recurrent, k);
        if (failed(rPart))
          return failure();
        return u.binary<nn::AddOp>(*part, *rPart);
      };
      Value next;
      if (cell == Cell::RNN) {
        TRY(pre, withRecurrent(xt, 0));
        TRY(ht, u.activation(act[0], pre));
        next = ht;
      } else if (cell == Cell::LSTM) {
        // ONNX gate order: i, o, f, c.
        TRY(iRaw, withRecurrent(xt, 0));
        TRY(iPre, peephole(iRaw, 0, c));
        TRY(oRaw, withRecurrent(xt, 1));
        TRY(cPre, withRecurrent(xt, 3));
        TRY(it, u.activation(act[0], iPre));
        TRY(ct, u.activation(act[1], cPre));
        TRY(cNew, u.binary<nn::MulOp>(it, ct));
        if (c) {
          TRY(fRaw, withRecurrent(xt, 2));
          TRY(fPre, peephole(fRaw, 2, c));
          TRY(ft, u.activation(act[0], fPre));
          TRY(kept, u.binary<nn::MulOp>(ft, *c));
          TRY(sum, u.binary<nn::AddOp>(kept, cNew));
          cNew = sum;
        }
        c = cNew;
        TRY(oPre, peephole(oRaw, 1, c));
        TRY(ot, u.activation(act[0], oPre));
        TRY(squashed, u.activation(act[2], cNew));
        TRY(ht, u.binary<nn::MulOp>(ot, squashed));
        next = ht;
      } else {
        // ONNX gate order: z, r, h.
        TRY(zPre, withRecurrent(xt, 0));
        TRY(zt, u.activation(act[0], zPre));
        TRY(hPre, gate(xt, 2));
        Value candidatePre = hPre;
        if (h) {
          TRY(rPre, withRecurrent(xt, 1));
          TRY(rt, u.activation(act[0], rPre));
          if (linearBeforeReset) {
            TRY(hr, gate(*recurrent, 2));
            Value reset = hr;
            if (resetBias) {
              TRY(biased, u.binary<nn::AddOp>(hr, *resetBias));
              reset = biased;
            }
            TRY(gated, u.binary<nn::MulOp>(rt, reset));
            TRY(sum, u.binary<nn::AddOp>(hPre, gated));
            candidatePre = sum;
          } else {
            TRY(resetH, u.binary<nn::MulOp>(rt, *h));
            TRY(product, u.gemmTransB(resetH, *rh, std::nullopt));
            TRY(sum, u.binary<nn::AddOp>(hPre, product));
            candidatePre = sum;
          }
        } else if (resetBias) {
          // No state: r * (0 R^T + Rbh).
          TRY(rPre, gate(xt, 1));
          TRY(rt, u.activation(act[0], rPre));
          TRY(gated, u.binary<nn::MulOp>(rt, *resetBias));
          TRY(sum, u.binary<nn::AddOp>(hPre, gated));
          candidatePre = sum;
        }
        TRY(candidate, u.activation(act[1], candidatePre));
        // H = (1 - z) candidate + z H_prev = candidate + z (H_prev -
        // candidate); without a state, candidate - z candidate.
        Value delta;
        if (h) {
          TRY(diff, u.binary<nn::SubOp>(*h, candidate));
          delta = diff;
        } else {
          TRY(neg, g.createValue<nn::NegOp>({candidate}));
          delta = neg;
        }
        TRY(scaled, u.binary<nn::MulOp>(zt, delta));
        TRY(ht, u.binary<nn::AddOp>(candidate, scaled));
        next = ht;
      }
      h = next;
      TRY(stepY, u.reshape(next, {1, 1, batch, hidden}));
      steps[t] = stepY;
    }
    TRY(y, u.concat(steps, 0));
    ys.push_back(y);
    TRY(hLast, u.reshape(*h, {1, batch, hidden}));
    lastH.push_back(hLast);
    if (c) {
      TRY(cLast, u.reshape(*c, {1, batch, hidden}));
      lastC.push_back(cLast);
    }
  }
  // Y [T, D, B, H], Y_h and Y_c [D, B, H]; layout 1: [B, T, D, H], [B, D, H].
  TRY(y, u.concat(ys, 1));
  TRY(yh, u.concat(lastH, 0));
  SmallVector<Value> outputs{y, yh};
  if (cell == Cell::LSTM) {
    TRY(yc, u.concat(lastC, 0));
    outputs.push_back(yc);
  }
  if (layout == 1) {
    TRY(yt, u.transpose(outputs[0], {2, 0, 1, 3}));
    outputs[0] = yt;
    for (size_t i = 1; i < outputs.size(); ++i) {
      TRY(st, u.transpose(outputs[i], {1, 0, 2}));
      outputs[i] = st;
    }
  }
  const onnx::NodeProto &node = g.getNode();
  for (size_t i = 0;
       i < outputs.size() && static_cast<int>(i) < node.output_size(); ++i)
    if (!node.output(static_cast<int>(i)).empty())
      g.setOutput(i, outputs[i]);
  return success();
}

#undef TRY

} // namespace

void gpipe::onnx_import::registerRecurrentImporters(OpImporterTable &t) {
  t.add("LSTM", 7,
        [](GraphImporter &g) { return importRecurrent(g, Cell::LSTM); });
  t.add("GRU", 7,
        [](GraphImporter &g) { return importRecurrent(g, Cell::GRU); });
  t.add("RNN", 7,
        [](GraphImporter &g) { return importRecurrent(g, Cell::RNN); });
}
