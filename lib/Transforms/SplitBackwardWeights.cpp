//===- SplitBackwardWeights.cpp - Input and weight gradients of a stage ---===//
//
// @backward (from gpipe-split-forward-backward) becomes @backward_input,
// the ops its input gradients depend on, and @backward_weight, the others:
// the B and W of zero-bubble pipeline schedules. Values both need are
// computed by B and carried to W.
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"
#include "Transforms/SplitForwardBackward.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace gpipe {
#define GEN_PASS_DEF_SPLITBACKWARDWEIGHTS
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

bool hasRole(DictionaryAttr attrs, Role role) { return roleOf(attrs) == role; }

/// The ops of `backward` that its input gradients depend on.
DenseSet<Operation *> inputGradientOps(func::FuncOp backward) {
  return resultSlice(
      backward, [](DictionaryAttr a) { return hasRole(a, Role::InputGrad); });
}

DictionaryAttr attrsOrEmpty(Builder &b, DictionaryAttr attrs) {
  return attrs ? attrs : b.getDictionaryAttr({});
}

struct SplitBackwardWeightsPass
    : public gpipe::impl::SplitBackwardWeightsBase<SplitBackwardWeightsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto backward = module.lookupSymbol<func::FuncOp>("backward");
    if (!backward) {
      module.emitError("no @backward to split (run "
                       "gpipe-split-forward-backward)");
      return signalPassFailure();
    }
    split(backward);
    backward.erase();
  }

  void split(func::FuncOp backward) {
    Block &body = backward.front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    DenseSet<Operation *> inputOps = inputGradientOps(backward);
    auto inB = [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && inputOps.contains(def);
    };

    // What W reads from outside its own ops: @backward's arguments (read
    // by name) and B's values (carried), in order of first use.
    SmallVector<unsigned> weightArgs;
    SmallVector<Value> carries;
    DenseSet<Value> seen;
    auto reads = [&](Value v) {
      if (isRematerializable(v) || !seen.insert(v).second)
        return;
      if (auto arg = dyn_cast<BlockArgument>(v))
        weightArgs.push_back(arg.getArgNumber());
      else if (inB(v))
        carries.push_back(v);
    };
    for (Operation &op : body.without_terminator())
      if (!inputOps.contains(&op))
        for (Value v : op.getOperands())
          reads(v);
    SmallVector<unsigned> inputResults, weightResults;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      bool input = hasRole(backward.getResultAttrDict(i), Role::InputGrad);
      (input ? inputResults : weightResults).push_back(i);
      if (!input)
        reads(ret.getOperand(i)); // a gradient B computed, or an argument
    }
    llvm::sort(weightArgs);

    OpBuilder b(backward);
    MLIRContext *ctx = b.getContext();
    Location loc = backward.getLoc();

    // @backward_input: every argument of @backward; the input gradients,
    // then the carries.
    auto input = b.create<func::FuncOp>(loc, "backward_input",
                                        backward.getFunctionType());
    {
      Block *block = input.addEntryBlock();
      IRMapping map;
      for (unsigned i = 0; i < body.getNumArguments(); ++i)
        map.map(body.getArgument(i), block->getArgument(i));
      OpBuilder ib = OpBuilder::atBlockEnd(block);
      for (Operation &op : body.without_terminator())
        if (inputOps.contains(&op))
          ib.clone(op, map);
      SmallVector<Value> results;
      SmallVector<Attribute> names;
      for (unsigned i : inputResults) {
        results.push_back(map.lookupOrDefault(ret.getOperand(i)));
        names.push_back(attrsOrEmpty(b, backward.getResultAttrDict(i)));
      }
      for (auto [i, v] : llvm::enumerate(carries)) {
        results.push_back(map.lookup(v));
        names.push_back(
            slotAttrs(ctx, "carry:" + std::to_string(i), Role::Carry));
      }
      ib.create<func::ReturnOp>(loc, results);
      input.setType(b.getFunctionType(backward.getArgumentTypes(),
                                      ValueRange(results).getTypes()));
      if (ArrayAttr argAttrs = backward.getAllArgAttrs())
        input.setAllArgAttrs(argAttrs);
      input.setAllResultAttrs(names);
    }

    // @backward_weight: the arguments it reads, then the carries; the
    // parameter gradients.
    SmallVector<Type> argTypes;
    SmallVector<Attribute> argNames;
    for (unsigned i : weightArgs) {
      argTypes.push_back(body.getArgument(i).getType());
      argNames.push_back(attrsOrEmpty(b, backward.getArgAttrDict(i)));
    }
    for (auto [i, v] : llvm::enumerate(carries)) {
      argTypes.push_back(v.getType());
      argNames.push_back(
          slotAttrs(ctx, "carry:" + std::to_string(i), Role::Carry));
    }
    auto weight = b.create<func::FuncOp>(loc, "backward_weight",
                                         b.getFunctionType(argTypes, {}));
    Block *block = weight.addEntryBlock();
    IRMapping map;
    for (auto [j, i] : llvm::enumerate(weightArgs))
      map.map(body.getArgument(i), block->getArgument(j));
    for (auto [i, v] : llvm::enumerate(carries))
      map.map(v, block->getArgument(weightArgs.size() + i));
    OpBuilder wb = OpBuilder::atBlockEnd(block);
    for (Operation &op : body.without_terminator()) {
      if (!inputOps.contains(&op)) {
        wb.clone(op, map);
        continue;
      }
      // B's parameters and constants: read again here (those W does not
      // read are dead below).
      if (!op.getResults().empty() &&
          llvm::all_of(op.getResults(), isRematerializable))
        wb.clone(op, map);
    }
    SmallVector<Value> grads;
    SmallVector<Attribute> gradNames;
    for (unsigned i : weightResults) {
      grads.push_back(map.lookup(ret.getOperand(i)));
      gradNames.push_back(attrsOrEmpty(b, backward.getResultAttrDict(i)));
    }
    wb.create<func::ReturnOp>(loc, grads);
    weight.setType(b.getFunctionType(argTypes, ValueRange(grads).getTypes()));
    weight.setAllArgAttrs(argNames);
    weight.setAllResultAttrs(gradNames);
    // What W cloned and nobody reads (B's values it did not need) is dead.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*block)))
      if (isOpTriviallyDead(&op))
        op.erase();
  }
};

} // namespace
