//===- GPipeOps.h - Ops of the gpipe dialect --------------------*- C++ -*-===//
#ifndef GPIPE_GPIPE_IR_GPIPEOPS_H
#define GPIPE_GPIPE_IR_GPIPEOPS_H

#include "GPipe/IR/GPipeDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "GPipe/IR/GPipeOps.h.inc"

namespace gpipe {
/// The `gpipe.name` of a function argument or result ("" if none): how
/// phases name their inputs and outputs (data inputs, "loss", "act:<n>",
/// "stash:<i>", "grad:<param>", ...).
inline llvm::StringRef nameOf(mlir::DictionaryAttr attrs) {
  auto name =
      attrs ? attrs.getAs<mlir::StringAttr>("gpipe.name") : mlir::StringAttr();
  return name ? name.getValue() : llvm::StringRef();
}
} // namespace gpipe

#endif // GPIPE_GPIPE_IR_GPIPEOPS_H
