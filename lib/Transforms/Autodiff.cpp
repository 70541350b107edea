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

  LogicalResult differentiate(ModuleOp module, func::FuncOp forward) {
    auto ret = cast<func::ReturnOp>(forward.front().getTerminator());
    if (ret.getNumOperands() == 0 ||
        cast<RankedTensorType>(ret.getOperand(0).getType()).getRank() != 0)
      return forward.emitError("the first result of @forward must be the "
                               "scalar loss (run gpipe-append-loss first)");
    OpBuilder b(forward);
    auto fb = cast<func::FuncOp>(b.clone(*forward));
    fb.setSymName("forward_backward");
    Block &body = fb.front();
    auto fbRet = cast<func::ReturnOp>(body.getTerminator());
    Type lossType = fbRet.getOperand(0).getType();
    unsigned seedIndex = fb.getNumArguments();
    fb.insertArgument(seedIndex, lossType,
                      b.getDictionaryAttr(b.getNamedAttr(
                          "gpipe.name", b.getStringAttr("loss_grad"))),
                      fb.getLoc());

    DenseMap<Value, Value> grads;
    OpBuilder gb(fbRet);
    auto accumulate = [&](Value v, Value g) {
      auto it = grads.find(v);
      if (it == grads.end()) {
        grads[v] = g;
        return;
      }
      it->second = gb.create<nn::AddOp>(g.getLoc(), ValueRange{it->second, g},
                                        ArrayRef<NamedAttribute>{});
    };
    grads[fbRet.getOperand(0)] = fb.getArgument(seedIndex);

    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    // Random dropouts get stream numbers, shared with their backward, so
    // that both draw the same mask.
    int64_t stream = 0;
    for (Operation *op : ops)
      if (auto dropout = dyn_cast<nn::DropoutOp>(op);
          dropout && dropout.isRandom())
        dropout.setStreamAttr(gb.getI64IntegerAttr(stream++));
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
      // Results with no gradient contribute zeros.
      for (auto [i, g] : llvm::enumerate(resultGrads))
        if (!g)
          return op->emitError("autodiff of ops whose results reach the "
                               "loss only in part is not implemented yet");
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
      names.push_back(gb.getDictionaryAttr(gb.getNamedAttr(
          "gpipe.name", gb.getStringAttr("grad:" + param.getSymName().str()))));
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
