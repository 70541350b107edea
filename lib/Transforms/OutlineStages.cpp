//===- OutlineStages.cpp - One module per pipeline stage ------------------===//
#include "Transforms/OutlineStages.h"

#include "GPipe/IR/GPipeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace gpipe;

FailureOr<SmallVector<OwningOpRef<ModuleOp>>>
gpipe::outlineStages(ModuleOp module) {
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    return module.emitError("no @forward function with stages");
  SmallVector<StageOp> stages(forward.front().getOps<StageOp>());
  if (stages.empty())
    return forward.emitError("@forward has no gpipe.stage (run "
                             "gpipe-partition first)");
  SmallVector<OwningOpRef<ModuleOp>> out;
  for (StageOp stage : stages) {
    OpBuilder b(module.getContext());
    OwningOpRef<ModuleOp> m = ModuleOp::create(module.getLoc());
    for (NamedAttribute attr : module->getAttrs())
      if (attr.getName() != SymbolTable::getSymbolAttrName())
        (*m)->setAttr(attr.getName(), attr.getValue());
    (*m)->setAttr("gpipe.stage_index",
                  b.getI64IntegerAttr(static_cast<int64_t>(stage.getIndex())));
    (*m)->setAttr("gpipe.num_stages", b.getI64IntegerAttr(stages.size()));
    (*m)->setAttr("gpipe.device", stage.getDeviceAttr());

    llvm::StringSet<> used;
    stage.walk([&](GetParameterOp get) { used.insert(get.getName()); });
    b.setInsertionPointToEnd(m->getBody());
    for (auto param : module.getOps<ParameterOp>()) {
      if (!used.contains(param.getSymName()))
        continue;
      // A weight that several stages read (tied embeddings) gets a copy in
      // each; they train it together (docs/training.md, "Tied weights").
      b.clone(*param);
    }
    Block &body = stage.getBody().front();
    auto yield = cast<YieldOp>(body.getTerminator());
    auto fn =
        b.create<func::FuncOp>(stage.getLoc(), "forward",
                               b.getFunctionType(body.getArgumentTypes(),
                                                 yield.getValues().getTypes()));
    Block *entry = fn.addEntryBlock();
    IRMapping map;
    for (auto [from, to] :
         llvm::zip(body.getArguments(), entry->getArguments()))
      map.map(from, to);
    OpBuilder fb = OpBuilder::atBlockEnd(entry);
    for (Operation &op : body.without_terminator())
      fb.clone(op, map);
    SmallVector<Value> results;
    for (Value v : yield.getValues())
      results.push_back(map.lookup(v));
    fb.create<func::ReturnOp>(yield.getLoc(), results);
    // Each argument and result keeps its name and role.
    auto slots = [&](StringRef namesAttr, StringRef rolesAttr, unsigned count) {
      auto names = stage->getAttrOfType<ArrayAttr>(namesAttr);
      auto roles = stage->getAttrOfType<ArrayAttr>(rolesAttr);
      SmallVector<DictionaryAttr> dicts;
      for (unsigned i = 0; i < count; ++i) {
        SmallVector<NamedAttribute> attrs;
        if (names && i < names.size())
          attrs.push_back(b.getNamedAttr("gpipe.name", names[i]));
        if (roles && i < roles.size())
          attrs.push_back(b.getNamedAttr(kRoleAttrName, roles[i]));
        dicts.push_back(b.getDictionaryAttr(attrs));
      }
      return dicts;
    };
    fn.setAllArgAttrs(
        slots("gpipe.input_names", "gpipe.input_roles", fn.getNumArguments()));
    fn.setAllResultAttrs(
        slots("gpipe.output_names", "gpipe.output_roles", fn.getNumResults()));
    out.push_back(std::move(m));
  }
  return out;
}
