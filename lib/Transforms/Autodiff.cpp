//===- Autodiff.cpp - Reverse-mode differentiation of @forward ------------===//
#include "Transforms/Passes.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace gpipe {
#define GEN_PASS_DEF_AUTODIFF
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// `a + b` when both are zero-pads of the same shape whose padded values
/// lie side by side along one axis (the gradients of slices that cut a
/// tensor along that axis: the q, k and v of an attention's joint
/// projection): the two values concatenated and padded once, or just
/// concatenated when together they fill the tensor. Null otherwise (the
/// caller adds). Adding the pads wrote zeros over the whole tensor twice
/// and read them back; this writes each element once.
Value mergeAdjacentZeroPads(OpBuilder &b, Value a, Value g) {
  auto pa = a.getDefiningOp<nn::PadOp>(), pb = g.getDefiningOp<nn::PadOp>();
  auto zero = [](nn::PadOp p) {
    return p && p.getMode() == "constant" && p.getValue().isZero() &&
           llvm::all_of(p.getPads(), [](int64_t x) { return x >= 0; });
  };
  if (!zero(pa) || !zero(pb) || a.getType() != g.getType())
    return Value();
  ArrayRef<int64_t> x = pa.getPads(), y = pb.getPads();
  int64_t rank = static_cast<int64_t>(x.size()) / 2, axis = -1;
  for (int64_t i = 0; i < rank; ++i) {
    if (x[i] == y[i] && x[rank + i] == y[rank + i])
      continue;
    if (axis >= 0)
      return Value(); // apart along two axes
    axis = i;
  }
  if (axis < 0)
    return Value(); // the same place: a real sum
  int64_t extent = cast<RankedTensorType>(a.getType()).getDimSize(axis);
  // [begin, end) of each padded value along the axis.
  int64_t aEnd = extent - x[rank + axis], gEnd = extent - y[rank + axis];
  nn::PadOp first = pa, second = pb;
  if (gEnd == x[axis])
    std::swap(first, second);
  else if (aEnd != y[axis])
    return Value(); // not side by side
  Location loc = g.getLoc();
  Value joined = b.create<nn::ConcatOp>(
      loc, ValueRange{first.getInput(), second.getInput()},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("axis", b.getI64IntegerAttr(axis))});
  SmallVector<int64_t> pads(first.getPads());
  pads[rank + axis] = second.getPads()[rank + axis];
  if (llvm::all_of(pads, [](int64_t p) { return p == 0; }))
    return joined;
  return b.create<nn::PadOp>(
      loc, ValueRange{joined},
      ArrayRef<NamedAttribute>{
          b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)),
          b.getNamedAttr("mode", b.getStringAttr("constant")),
          b.getNamedAttr("value", b.getF64FloatAttr(0.0))});
}

struct AutodiffPass : public gpipe::impl::AutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError("no @forward function to differentiate");
      return signalPassFailure();
    }
    if (failed(differentiate(module, forward)))
      return signalPassFailure();
    forward.erase();
  }

  static bool isFloatTensor(Type t) {
    auto type = dyn_cast<RankedTensorType>(t);
    return type && isa<FloatType>(type.getElementType());
  }

  LogicalResult differentiate(ModuleOp module, func::FuncOp forward) {
    auto ret = cast<func::ReturnOp>(forward.front().getTerminator());
    // The seeds: the loss (result 0 when it is a scalar that is not a
    // stage output), and the stage outputs "act:<n>" of a pipeline stage,
    // whose gradients come from the next stage.
    SmallVector<unsigned> actResults;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i)
      if (resultRole(forward, i) == Role::Activation &&
          isFloatTensor(ret.getOperand(i).getType()))
        actResults.push_back(i);
    bool hasLoss =
        ret.getNumOperands() > 0 &&
        cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() == 0 &&
        resultRole(forward, 0) != Role::Activation;
    if (!hasLoss && actResults.empty())
      return forward.emitError("the first result of @forward must be the "
                               "scalar loss (run gpipe-append-loss first)");
    OpBuilder b(forward);
    auto fb = cast<func::FuncOp>(b.clone(*forward));
    fb.setSymName("forward_backward");
    Block &body = fb.front();
    auto fbRet = cast<func::ReturnOp>(body.getTerminator());
    unsigned dataArgs = fb.getNumArguments();
    auto addSeed = [&](Type type, StringRef name, Role role) {
      unsigned index = fb.getNumArguments();
      fb.insertArgument(index, type, slotAttrs(b.getContext(), name, role),
                        fb.getLoc());
      return fb.getArgument(index);
    };
    SmallVector<std::pair<Value, Value>> seeds;
    if (hasLoss)
      seeds.push_back(
          {fbRet.getOperand(0), addSeed(fbRet.getOperand(0).getType(),
                                        "loss_grad", Role::LossGrad)});
    for (unsigned i : actResults)
      seeds.push_back(
          {fbRet.getOperand(i),
           addSeed(fbRet.getOperand(i).getType(),
                   ("output_grad:" + nameOf(fb.getResultAttrDict(i))).str(),
                   Role::OutputGrad)});

    DenseMap<Value, Value> grads;
    OpBuilder gb(fbRet);
    auto accumulate = [&](Value v, Value g) {
      auto it = grads.find(v);
      if (it == grads.end()) {
        grads[v] = g;
        return;
      }
      if (Value merged = mergeAdjacentZeroPads(gb, it->second, g)) {
        for (Value dead : {it->second, g})
          if (dead.use_empty())
            dead.getDefiningOp()->erase();
        it->second = merged;
        return;
      }
      it->second = gb.create<nn::AddOp>(g.getLoc(), ValueRange{it->second, g},
                                        ArrayRef<NamedAttribute>{});
    };
    for (auto [value, seed] : seeds)
      accumulate(value, seed);

    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    // Random dropouts get stream numbers, shared with their backward, so
    // that both draw the same mask (gpipe-partition numbers them across
    // the whole model first).
    int64_t stream = 0;
    for (Operation *op : ops)
      nn::numberRandomStream(op, stream, gb);
    llvm::StringMap<Value> paramGrads;
    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Value> resultGrads;
      bool reached = false;
      for (Value r : op->getResults()) {
        Value g = grads.lookup(r);
        reached |= static_cast<bool>(g);
        resultGrads.push_back(g);
      }
      if (!reached)
        continue;
      if (auto get = dyn_cast<GetParameterOp>(op)) {
        paramGrads[get.getName()] = resultGrads[0];
        continue;
      }
      if (op->getNumOperands() == 0)
        continue; // constants
      auto vjp = dyn_cast<nn::VJPOpInterface>(op);
      if (!vjp)
        return op->emitError("'")
               << op->getName() << "' has no VJP rule yet (autodiff)";
      for (auto [i, g] : llvm::enumerate(resultGrads)) {
        if (!vjp.isDifferentiableResult(i)) {
          if (g)
            return op->emitError("result ")
                   << i << " of '" << op->getName()
                   << "' reaches the loss but is not differentiable";
          continue;
        }
        if (!g)
          return op->emitError("autodiff of ops whose results reach the "
                               "loss only in part is not implemented yet");
      }
      SmallVector<Value> operandGrads;
      if (failed(vjp.buildVJP(gb, resultGrads, operandGrads)))
        return failure();
      for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
        if (g)
          accumulate(operand, g);
    }

    // Results: the forward's, then one gradient per trainable parameter.
    SmallVector<Value> results(fbRet.getOperands());
    SmallVector<Attribute> names;
    for (unsigned i = 0; i < fbRet.getNumOperands(); ++i)
      names.push_back(fb.getResultAttrDict(i)
                          ? Attribute(fb.getResultAttrDict(i))
                          : gb.getDictionaryAttr({}));
    for (auto param : module.getOps<ParameterOp>()) {
      if (!param.getTrainable())
        continue;
      Value g = paramGrads.lookup(param.getSymName());
      if (!g) {
        // A parameter that does not reach the loss: zero gradient.
        g = gb.create<nn::ConstantOp>(
            param.getLoc(), ValueRange{},
            ArrayRef<NamedAttribute>{gb.getNamedAttr(
                "value",
                DenseElementsAttr::get(
                    param.getType(),
                    gb.getZeroAttr(param.getType().getElementType())))});
      }
      results.push_back(g);
      names.push_back(slotAttrs(gb.getContext(),
                                "grad:" + param.getSymName().str(),
                                Role::ParamGrad));
    }
    // A stage's input gradients, sent back to the stage before it.
    for (unsigned i = 0; i < dataArgs; ++i) {
      StringRef name = nameOf(fb.getArgAttrDict(i));
      BlockArgument arg = fb.getArgument(i);
      if (argRole(fb, i) != Role::Activation || !isFloatTensor(arg.getType()))
        continue;
      Value g = grads.lookup(arg);
      if (!g) {
        auto type = cast<RankedTensorType>(arg.getType());
        g = gb.create<nn::ConstantOp>(
            fb.getLoc(), ValueRange{},
            ArrayRef<NamedAttribute>{gb.getNamedAttr(
                "value", DenseElementsAttr::get(
                             type, gb.getZeroAttr(type.getElementType())))});
      }
      results.push_back(g);
      names.push_back(slotAttrs(gb.getContext(), ("input_grad:" + name).str(),
                                Role::InputGrad));
    }
    gb.create<func::ReturnOp>(fbRet.getLoc(), results);
    fbRet.erase();
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    fb.setType(gb.getFunctionType(fb.getArgumentTypes(), types));
    fb.setAllResultAttrs(names);
    // Gradients nobody returns (e.g. of the inputs) are dead.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (isOpTriviallyDead(&op))
        op.erase();
    return success();
  }
};

} // namespace
