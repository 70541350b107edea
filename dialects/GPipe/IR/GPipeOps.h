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
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "gpipe/common/Role.h"

#include <optional>

#define GET_ATTRDEF_CLASSES
#include "GPipe/IR/GPipeAttrs.h.inc"

#define GET_OP_CLASSES
#include "GPipe/IR/GPipeOps.h.inc"

namespace gpipe {
/// The `gpipe.name` of a function argument or result ("" if none): what
/// phases call their inputs and outputs (a data input's graph name, "loss",
/// "act:<n>", "stash:<i>", "grad:<param>", ...). Names identify a tensor
/// across phases and stages; what it is for is its role.
inline llvm::StringRef nameOf(mlir::DictionaryAttr attrs) {
  auto name =
      attrs ? attrs.getAs<mlir::StringAttr>("gpipe.name") : mlir::StringAttr();
  return name ? name.getValue() : llvm::StringRef();
}

/// The attribute name of a role on function arguments and results.
constexpr llvm::StringLiteral kRoleAttrName = "gpipe.role";

/// The `gpipe.role` of a function argument or result, or none.
std::optional<Role> roleOf(mlir::DictionaryAttr attrs);
/// An argument's or result's role; without one, an argument is `data` and a
/// result is a model `output`.
Role argRole(mlir::FunctionOpInterface f, unsigned index);
Role resultRole(mlir::FunctionOpInterface f, unsigned index);
/// The module attribute mapping each data input whose samples are not on
/// the first axis of the arrays a user gives (a sequence-first [T, B]
/// input, labels [T, B] for [T, B, V] logits) to that axis. The phases
/// take every data input batch-first; the runtime moves the samples of
/// arrays in the model's layout to the front (docs/importer.md).
constexpr llvm::StringLiteral kDataBatchAxesAttrName = "gpipe.data_batch_axes";

/// `{gpipe.name = name, gpipe.role = role}`.
mlir::DictionaryAttr slotAttrs(mlir::MLIRContext *context, llvm::StringRef name,
                               Role role);
} // namespace gpipe

#endif // GPIPE_GPIPE_IR_GPIPEOPS_H
