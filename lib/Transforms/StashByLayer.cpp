//===- StashByLayer.cpp - What a model's backward keeps, by layer ---------===//
#include "Transforms/SplitForwardBackward.h"

#include "NN/IR/NNOps.h"
#include "Transforms/Passes.h"
#include "Transforms/StashPrecision.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;
using namespace gpipe;

std::vector<LayerTable::StashedValue>
gpipe::stashByLayer(ModuleOp module, const LayerTable &table) {
  MLIRContext *context = module.getContext();
  StringRef tag = "gpipe.layer";
  for (auto [i, op] : llvm::enumerate(table.layers))
    op->setAttr(tag, IntegerAttr::get(IntegerType::get(context, 64), i));
  OwningOpRef<ModuleOp> differentiated(module.clone());
  for (Operation *op : table.layers)
    op->removeAttr(tag);
  {
    ScopedDiagnosticHandler quiet(context,
                                  [](Diagnostic &) { return success(); });
    PassManager pm(context);
    pm.addPass(createAutodiff());
    if (failed(pm.run(*differentiated)))
      return {};
  }
  auto fb = differentiated->lookupSymbol<func::FuncOp>("forward_backward");
  if (!fb)
    return {};
  auto layerOf = [&](Operation *op) -> std::optional<int64_t> {
    if (auto index = op->getAttrOfType<IntegerAttr>(tag))
      return index.getInt();
    return std::nullopt;
  };
  llvm::DenseSet<Operation *> forward = forwardOps(fb);
  std::vector<LayerTable::StashedValue> stashed;
  for (Value v : gpipe::stashedValues(fb, forward)) {
    // Kept in bfloat16 where the backward only multiplies it in bfloat16.
    int64_t bytes = nn::detail::numBytes(v.getType());
    if (onlyMultipliedInBf16(
            v, [&](Operation *user) { return !forward.contains(user); }))
      bytes = bf16StashBytes(bytes);
    LayerTable::StashedValue s{-1, -1, static_cast<double>(bytes)};
    if (Operation *def = v.getDefiningOp())
      s.layer = layerOf(def).value_or(-1);
    for (Operation *user : v.getUsers()) {
      if (isa<func::ReturnOp>(user))
        s.lastUse = std::max(s.lastUse, table.size());
      else if (forward.contains(user))
        s.lastUse = std::max(s.lastUse, layerOf(user).value_or(-1));
    }
    stashed.push_back(s);
  }
  return stashed;
}
