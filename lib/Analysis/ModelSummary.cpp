//===- ModelSummary.cpp - A human-readable summary of a model -------------===//
#include "Analysis/ModelSummary.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"

using namespace mlir;

namespace {

std::string describe(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

struct OpStats {
  int64_t count = 0, flops = 0, bytes = 0;
};

} // namespace

void gpipe::printModelSummary(ModuleOp module, llvm::raw_ostream &os) {
  auto name = module->getAttrOfType<StringAttr>("gpipe.model_name");
  os << "model: " << (name ? name.getValue() : "<unnamed>");
  if (auto opset = module->getAttrOfType<IntegerAttr>("gpipe.onnx_opset"))
    os << " (ONNX opset " << opset.getInt() << ")";
  os << "\n";
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward) {
    os << "no @forward function\n";
    return;
  }
  auto batchAxes =
      module->getAttrOfType<DictionaryAttr>(gpipe::kDataBatchAxesAttrName);
  for (auto [i, argType] : llvm::enumerate(forward.getArgumentTypes())) {
    Type type = argType;
    auto label = forward.getArgAttrOfType<StringAttr>(i, "gpipe.name");
    // In the model's layout: a sequence-first input as [T, B].
    auto axis = label && batchAxes ? batchAxes.getAs<IntegerAttr>(label)
                                   : IntegerAttr();
    auto ranked = dyn_cast<RankedTensorType>(type);
    if (axis && ranked && axis.getInt() < ranked.getRank()) {
      SmallVector<int64_t> shape(ranked.getShape().drop_front());
      shape.insert(shape.begin() + axis.getInt(), ranked.getDimSize(0));
      type = RankedTensorType::get(shape, ranked.getElementType());
    }
    os << "input:  " << (label ? label.getValue() : "?") << " "
       << describe(type);
    if (axis)
      os << " (the batch on axis " << axis.getInt() << ")";
    os << "\n";
  }
  for (auto [i, type] : llvm::enumerate(forward.getResultTypes())) {
    auto label = forward.getResultAttrOfType<StringAttr>(i, "gpipe.name");
    os << "output: " << (label ? label.getValue() : "?") << " "
       << describe(type) << "\n";
  }

  int64_t trainable = 0, frozen = 0, trainableValues = 0, frozenValues = 0;
  for (auto param : module.getOps<ParameterOp>()) {
    int64_t n = param.getType().getNumElements();
    if (param.getTrainable()) {
      ++trainable;
      trainableValues += n;
    } else {
      ++frozen;
      frozenValues += n;
    }
  }
  os << "parameters: " << trainable << " trainable tensors (" << trainableValues
     << " values), " << frozen << " other (" << frozenValues << " values)\n";
  // What will train, then the floating-point initializers that will not,
  // and why.
  for (auto param : module.getOps<ParameterOp>())
    if (param.getTrainable())
      os << "trainable: " << param.getSymName() << " "
         << describe(param.getType()) << "\n";
  for (auto param : module.getOps<ParameterOp>())
    if (auto reason = param->getAttrOfType<StringAttr>("gpipe.frozen_reason"))
      os << "frozen: " << param.getSymName() << " " << describe(param.getType())
         << ": " << reason.getValue() << "\n";
  if (auto folded =
          module->getAttrOfType<DictionaryAttr>("gpipe.folded_frozen"))
    for (NamedAttribute entry : folded)
      os << "frozen: " << entry.getName().getValue()
         << " (folded into constants): "
         << cast<StringAttr>(entry.getValue()).getValue() << "\n";

  llvm::MapVector<StringRef, OpStats> stats;
  OpStats total;
  forward.walk([&](nn::CostOpInterface op) {
    OpStats &s = stats[op->getName().getStringRef()];
    int64_t flops = op.getFlops(), bytes = op.getBytesMoved();
    ++s.count;
    s.flops += flops;
    s.bytes += bytes;
    ++total.count;
    total.flops += flops;
    total.bytes += bytes;
  });
  llvm::sort(stats, [](const auto &a, const auto &b) {
    return a.second.flops > b.second.flops ||
           (a.second.flops == b.second.flops && a.first < b.first);
  });
  os << "forward pass (one batch):\n";
  os << llvm::format("  %-22s %6s %12s %12s\n", static_cast<const char *>("op"),
                     static_cast<const char *>("count"),
                     static_cast<const char *>("MFLOP"),
                     static_cast<const char *>("MB moved"));
  auto row = [&](StringRef label, const OpStats &s) {
    os << llvm::format("  %-22s %6lld %12.3f %12.3f\n", label.str().c_str(),
                       static_cast<long long>(s.count), s.flops / 1e6,
                       s.bytes / 1e6);
  };
  for (auto &[opName, s] : stats)
    row(opName, s);
  row("total", total);
}
