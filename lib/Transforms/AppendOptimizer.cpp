//===- AppendOptimizer.cpp - The optimizer phase of a stage ---------------===//
//
// @optimizer updates every trainable parameter from its accumulated
// gradient with nn element-wise ops (fused and compiled like any other
// stage code) and writes it back with gpipe.assign_parameter. The state of
// the optimizer lives in parameters of its own.
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

namespace gpipe {
#define GEN_PASS_DEF_APPENDOPTIMIZER
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// Builds the update of one parameter.
class UpdateBuilder {
public:
  UpdateBuilder(OpBuilder &b, Location loc, ModuleOp module,
                llvm::StringMap<Value> &hyper)
      : b(b), loc(loc), module(module), hyper(hyper) {}

  Value mul(Value l, Value r) { return binary<nn::MulOp>(l, r); }
  Value add(Value l, Value r) { return binary<nn::AddOp>(l, r); }
  Value sub(Value l, Value r) { return binary<nn::SubOp>(l, r); }
  Value div(Value l, Value r) { return binary<nn::DivOp>(l, r); }
  Value sqrt(Value v) {
    return b.create<nn::SqrtOp>(loc, v.getType(), v).getResult();
  }
  Value h(StringRef name) { return hyper.lookup(name); }
  Value one() {
    auto type = RankedTensorType::get({}, b.getF32Type());
    return b.create<nn::ConstantOp>(
        loc, ValueRange{},
        ArrayRef<NamedAttribute>{b.getNamedAttr(
            "value", DenseElementsAttr::get(type, b.getF32FloatAttr(1.0)))});
  }

  /// A zero-initialized state parameter `__opt.<kind>:<name>` and its value.
  std::pair<StringRef, Value> state(ParameterOp param, StringRef kind) {
    std::string name = ("__opt." + kind + ":" + param.getSymName()).str();
    OpBuilder mb(module.getBodyRegion());
    mb.setInsertionPointAfter(param);
    RankedTensorType type = param.getType();
    auto created = mb.create<ParameterOp>(
        param.getLoc(), name,
        DenseElementsAttr::get(type, b.getZeroAttr(type.getElementType())),
        /*trainable=*/false, /*optimizer_state=*/true, /*constant=*/false);
    return {created.getSymName(), read(created)};
  }
  Value read(ParameterOp param) {
    return b.create<GetParameterOp>(
        loc, param.getType(), FlatSymbolRefAttr::get(param.getSymNameAttr()));
  }
  void write(StringRef name, Value v) {
    b.create<AssignParameterOp>(
        loc, FlatSymbolRefAttr::get(b.getContext(), name), v);
  }

private:
  template <typename OpTy> Value binary(Value l, Value r) {
    return b.create<OpTy>(loc, ValueRange{l, r}, ArrayRef<NamedAttribute>{});
  }
  OpBuilder &b;
  Location loc;
  ModuleOp module;
  llvm::StringMap<Value> &hyper;
};

struct AppendOptimizerPass
    : public gpipe::impl::AppendOptimizerBase<AppendOptimizerPass> {
  using AppendOptimizerBase::AppendOptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw") {
      module.emitError("optimizer must be sgd, adam or adamw, not '")
          << optimizer << "'";
      return signalPassFailure();
    }
    if (module.lookupSymbol("optimizer")) {
      module.emitError("the module already has an @optimizer");
      return signalPassFailure();
    }
    SmallVector<ParameterOp> trained;
    for (auto p : module.getOps<ParameterOp>())
      if (p.getTrainable()) {
        if (!p.getType().getElementType().isF32()) {
          p.emitError("the optimizer updates float32 parameters only");
          return signalPassFailure();
        }
        trained.push_back(p);
      }

    SmallVector<std::string> hyperNames{"lr", "weight_decay"};
    if (optimizer == "sgd")
      hyperNames.push_back("momentum");
    else
      hyperNames.append(
          {"beta1", "beta2", "eps", "step_size", "bias_correction2"});
    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToEnd(module.getBody());
    Location loc = module.getLoc();
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    SmallVector<Type> inputs;
    SmallVector<Attribute> names;
    for (ParameterOp p : trained) {
      inputs.push_back(p.getType());
      names.push_back(slotAttrs(b.getContext(), "grad:" + p.getSymName().str(),
                                Role::ParamGrad));
    }
    for (const std::string &h : hyperNames) {
      inputs.push_back(scalar);
      names.push_back(slotAttrs(b.getContext(), "hyper:" + h, Role::Hyper));
    }
    auto func =
        b.create<func::FuncOp>(loc, "optimizer", b.getFunctionType(inputs, {}));
    func.setAllArgAttrs(names);
    Block *block = func.addEntryBlock();
    b.setInsertionPointToStart(block);
    llvm::StringMap<Value> hyper;
    for (auto [i, h] : llvm::enumerate(hyperNames))
      hyper[h] = block->getArgument(trained.size() + i);

    UpdateBuilder u(b, loc, module, hyper);
    for (auto [i, param] : llvm::enumerate(trained)) {
      Value g = block->getArgument(i), p = u.read(param);
      if (optimizer == "sgd") {
        // d = g + wd p; buf = mu buf + d; d = nesterov ? d + mu buf : buf.
        Value d = u.add(g, u.mul(u.h("weight_decay"), p));
        if (momentum) {
          auto [bufName, buf] = u.state(param, "momentum");
          Value next = u.add(u.mul(u.h("momentum"), buf), d);
          u.write(bufName, next);
          d = nesterov ? u.add(d, u.mul(u.h("momentum"), next)) : next;
        }
        u.write(param.getSymName(), u.sub(p, u.mul(u.h("lr"), d)));
        continue;
      }
      // Adam: g += wd p. AdamW: p *= 1 - lr wd. Then the moments and
      // p -= step_size m / (sqrt(v) / bias_correction2 + eps).
      Value one = u.one();
      if (optimizer == "adamw")
        p = u.mul(p, u.sub(one, u.mul(u.h("lr"), u.h("weight_decay"))));
      else
        g = u.add(g, u.mul(u.h("weight_decay"), p));
      auto [mName, m] = u.state(param, "m");
      auto [vName, v] = u.state(param, "v");
      Value beta1 = u.h("beta1"), beta2 = u.h("beta2");
      Value nextM = u.add(u.mul(beta1, m), u.mul(u.sub(one, beta1), g));
      Value nextV =
          u.add(u.mul(beta2, v), u.mul(u.sub(one, beta2), u.mul(g, g)));
      u.write(mName, nextM);
      u.write(vName, nextV);
      Value denom =
          u.add(u.div(u.sqrt(nextV), u.h("bias_correction2")), u.h("eps"));
      u.write(param.getSymName(),
              u.sub(p, u.div(u.mul(u.h("step_size"), nextM), denom)));
    }
    b.create<func::ReturnOp>(loc);
  }
};

} // namespace
