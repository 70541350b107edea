//===- GPipeDialect.cpp - The gpipe dialect -------------------------------===//
#include "GPipe/IR/GPipeDialect.h"
#include "GPipe/IR/GPipeOps.h"

using namespace mlir;
using namespace gpipe;

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "GPipe/IR/GPipeDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "GPipe/IR/GPipeAttrs.cpp.inc"

void GPipeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "GPipe/IR/GPipeOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "GPipe/IR/GPipeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RoleAttr
//===----------------------------------------------------------------------===//

Attribute RoleAttr::parse(AsmParser &parser, Type) {
  std::string name;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeywordOrString(&name) ||
      parser.parseGreater())
    return {};
  std::optional<Role> role = roleFromName(name);
  if (!role) {
    parser.emitError(loc, "unknown role '") << name << "'";
    return {};
  }
  return RoleAttr::get(parser.getContext(), *role);
}

void RoleAttr::print(AsmPrinter &printer) const {
  std::string_view name = roleName(getValue());
  printer << "<" << llvm::StringRef(name.data(), name.size()) << ">";
}

std::optional<Role> gpipe::roleOf(DictionaryAttr attrs) {
  if (!attrs)
    return std::nullopt;
  if (auto role = attrs.getAs<RoleAttr>(kRoleAttrName))
    return role.getValue();
  return std::nullopt;
}

Role gpipe::argRole(FunctionOpInterface f, unsigned index) {
  return roleOf(f.getArgAttrDict(index)).value_or(Role::Data);
}

Role gpipe::resultRole(FunctionOpInterface f, unsigned index) {
  return roleOf(f.getResultAttrDict(index)).value_or(Role::Output);
}

DictionaryAttr gpipe::slotAttrs(MLIRContext *context, StringRef name,
                                Role role) {
  Builder b(context);
  return b.getDictionaryAttr(
      {b.getNamedAttr("gpipe.name", b.getStringAttr(name)),
       b.getNamedAttr(kRoleAttrName, RoleAttr::get(context, role))});
}
