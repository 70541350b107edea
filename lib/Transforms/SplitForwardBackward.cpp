//===- SplitForwardBackward.cpp - Forward and backward phases of a stage --===//
//
// @forward_backward (from gpipe-autodiff) becomes @forward and @backward.
// The forward ops are those the forward results (loss, model outputs)
// depend on; every other op belongs to the backward. With recompute, the
// backward clones the forward ops it needs instead of receiving their
// results.
//
//===----------------------------------------------------------------------===//
#include "Transforms/SplitForwardBackward.h"
#include "Transforms/Passes.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace gpipe {
#define GEN_PASS_DEF_SPLITFORWARDBACKWARD
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// Parameter gradients and, on a pipeline stage, input gradients.
bool isGradient(DictionaryAttr attrs) {
  std::optional<Role> role = roleOf(attrs);
  return role == Role::ParamGrad || role == Role::InputGrad;
}

/// The backward's seeds: the loss's, and on a stage its outputs'.
bool isSeed(DictionaryAttr attrs) {
  std::optional<Role> role = roleOf(attrs);
  return role == Role::LossGrad || role == Role::OutputGrad;
}

/// The seed arguments: they trail the data inputs.
unsigned firstSeedArgument(func::FuncOp fb) {
  unsigned first = fb.getNumArguments();
  while (first > 0 && isSeed(fb.getArgAttrDict(first - 1)))
    --first;
  return first;
}

struct SplitForwardBackwardPass
    : public gpipe::impl::SplitForwardBackwardBase<SplitForwardBackwardPass> {
  using SplitForwardBackwardBase::SplitForwardBackwardBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fb = module.lookupSymbol<func::FuncOp>("forward_backward");
    if (!fb) {
      module.emitError("no @forward_backward to split (run gpipe-autodiff)");
      return signalPassFailure();
    }
    if (recompute != "never" && recompute != "always" &&
        recompute != "except-last") {
      module.emitError("recompute must be never, always or except-last, not '")
          << recompute << "'";
      return signalPassFailure();
    }
    bool recomputeAll =
        recompute == "always" || (recompute == "except-last" && !lastStage);
    if (failed(split(fb, recomputeAll)))
      return signalPassFailure();
    fb.erase();
  }

  LogicalResult split(func::FuncOp fb, bool recomputeAll) {
    Block &body = fb.front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // The seeds trail the data inputs.
    unsigned firstSeed = firstSeedArgument(fb);
    if (firstSeed == fb.getNumArguments())
      return fb.emitError("@forward_backward must end with its seeds "
                          "(loss_grad or output_grad:<act>)");
    DenseSet<Value> seeds;
    for (unsigned i = firstSeed; i < fb.getNumArguments(); ++i)
      seeds.insert(body.getArgument(i));

    // Forward results come first, gradients after.
    SmallVector<unsigned> forwardResults, gradResults;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i)
      (isGradient(fb.getResultAttrDict(i)) ? gradResults : forwardResults)
          .push_back(i);

    DenseSet<Operation *> forwardOps = gpipe::forwardOps(fb);
    for (Value seed : seeds)
      if (llvm::any_of(seed.getUsers(),
                       [&](Operation *u) { return forwardOps.contains(u); }))
        return fb.emitError("the forward results depend on a seed gradient");

    OpBuilder b(fb);
    // @forward: the forward ops, returning the forward results and, without
    // recompute, every value the backward reads from them (or from the
    // inputs).
    SmallVector<Value> stash;
    if (!recomputeAll)
      stash = stashedValues(fb, forwardOps);
    SmallVector<Type> dataTypes;
    SmallVector<DictionaryAttr> dataAttrs;
    for (unsigned i = 0; i < firstSeed; ++i) {
      dataTypes.push_back(fb.getArgument(i).getType());
      dataAttrs.push_back(fb.getArgAttrDict(i));
    }
    auto forward = b.create<func::FuncOp>(fb.getLoc(), "forward",
                                          b.getFunctionType(dataTypes, {}));
    {
      Block *block = forward.addEntryBlock();
      IRMapping map;
      for (unsigned i = 0; i < firstSeed; ++i)
        map.map(body.getArgument(i), block->getArgument(i));
      OpBuilder fbuilder = OpBuilder::atBlockEnd(block);
      for (Operation &op : body.without_terminator())
        if (forwardOps.contains(&op))
          fbuilder.clone(op, map);
      SmallVector<Value> results;
      SmallVector<Attribute> names;
      for (unsigned i : forwardResults) {
        results.push_back(map.lookup(ret.getOperand(i)));
        names.push_back(fb.getResultAttrDict(i)
                            ? Attribute(fb.getResultAttrDict(i))
                            : b.getDictionaryAttr({}));
      }
      for (auto [i, v] : llvm::enumerate(stash)) {
        results.push_back(map.lookupOrDefault(v));
        names.push_back(slotAttrs(b.getContext(), "stash:" + std::to_string(i),
                                  Role::Stash));
      }
      fbuilder.create<func::ReturnOp>(fb.getLoc(), results);
      SmallVector<Type> types;
      for (Value v : results)
        types.push_back(v.getType());
      forward.setType(b.getFunctionType(dataTypes, types));
      for (auto [i, attrs] : llvm::enumerate(dataAttrs))
        if (attrs)
          forward.setArgAttrs(i, attrs);
      forward.setAllResultAttrs(names);
    }

    // @backward: (kept values or data inputs, loss_grad) -> gradients.
    SmallVector<Type> inTypes;
    SmallVector<Attribute> inNames;
    if (recomputeAll) {
      inTypes = dataTypes;
      for (DictionaryAttr a : dataAttrs)
        inNames.push_back(a ? Attribute(a) : b.getDictionaryAttr({}));
    } else {
      for (auto [i, v] : llvm::enumerate(stash)) {
        inTypes.push_back(v.getType());
        inNames.push_back(slotAttrs(b.getContext(),
                                    "stash:" + std::to_string(i), Role::Stash));
      }
    }
    for (unsigned i = firstSeed; i < fb.getNumArguments(); ++i) {
      inTypes.push_back(body.getArgument(i).getType());
      inNames.push_back(fb.getArgAttrDict(i));
    }
    auto backward = b.create<func::FuncOp>(fb.getLoc(), "backward",
                                           b.getFunctionType(inTypes, {}));
    Block *block = backward.addEntryBlock();
    IRMapping map;
    if (recomputeAll) {
      for (unsigned i = 0; i < firstSeed; ++i)
        map.map(body.getArgument(i), block->getArgument(i));
    } else {
      for (auto [i, v] : llvm::enumerate(stash))
        map.map(v, block->getArgument(i));
    }
    unsigned numSeeds = fb.getNumArguments() - firstSeed;
    for (unsigned i = 0; i < numSeeds; ++i)
      map.map(body.getArgument(firstSeed + i),
              block->getArgument(block->getNumArguments() - numSeeds + i));
    OpBuilder bb = OpBuilder::atBlockEnd(block);
    for (Operation &op : body.without_terminator()) {
      bool isForward = forwardOps.contains(&op);
      if (isForward && !recomputeAll && !op.getResults().empty() &&
          !llvm::all_of(op.getResults(), isRematerializable))
        continue; // kept by the forward
      Operation *copy = bb.clone(op, map);
      if (isForward && recomputeAll)
        copy->setAttr("gpipe.recompute", bb.getUnitAttr());
    }
    SmallVector<Value> grads;
    SmallVector<Attribute> gradNames;
    SmallVector<Type> gradTypes;
    for (unsigned i : gradResults) {
      grads.push_back(map.lookup(ret.getOperand(i)));
      gradTypes.push_back(grads.back().getType());
      gradNames.push_back(fb.getResultAttrDict(i));
    }
    bb.create<func::ReturnOp>(fb.getLoc(), grads);
    backward.setType(b.getFunctionType(inTypes, gradTypes));
    backward.setAllArgAttrs(inNames);
    backward.setAllResultAttrs(gradNames);
    // The forward results and recomputed values nobody reads are dead.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*block)))
      if (isOpTriviallyDead(&op))
        op.erase();
    return success();
  }
};

} // namespace

bool gpipe::isRematerializable(Value v) {
  Operation *def = v.getDefiningOp();
  return def &&
         (isa<GetParameterOp>(def) || def->hasTrait<OpTrait::ConstantLike>());
}

DenseSet<Operation *>
gpipe::resultSlice(func::FuncOp func,
                   llvm::function_ref<bool(DictionaryAttr)> wanted) {
  auto ret = cast<func::ReturnOp>(func.front().getTerminator());
  DenseSet<Operation *> ops;
  SmallVector<Value> worklist;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    if (wanted(func.getResultAttrDict(i)))
      worklist.push_back(ret.getOperand(i));
  while (!worklist.empty()) {
    Operation *def = worklist.pop_back_val().getDefiningOp();
    if (!def || !ops.insert(def).second)
      continue;
    llvm::append_range(worklist, def->getOperands());
  }
  return ops;
}

DenseSet<Operation *> gpipe::forwardOps(func::FuncOp fb) {
  // The backward slice of the forward results (those not gradients).
  return resultSlice(fb, [](DictionaryAttr a) { return !isGradient(a); });
}

SmallVector<Value> gpipe::stashedValues(func::FuncOp fb,
                                        const DenseSet<Operation *> &forward) {
  Block &body = fb.front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  unsigned firstSeed = firstSeedArgument(fb);
  SmallVector<Value> stash;
  DenseSet<Value> seen;
  auto keep = [&](Value v) {
    bool fromForward = v.getDefiningOp()
                           ? forward.contains(v.getDefiningOp())
                           : cast<BlockArgument>(v).getArgNumber() < firstSeed;
    if (fromForward && !isRematerializable(v) && seen.insert(v).second)
      stash.push_back(v);
  };
  for (Operation &op : body.without_terminator())
    if (!forward.contains(&op))
      for (Value v : op.getOperands())
        keep(v);
  for (unsigned i = 0; i < ret.getNumOperands(); ++i)
    if (isGradient(fb.getResultAttrDict(i)))
      keep(ret.getOperand(i));
  return stash;
}
