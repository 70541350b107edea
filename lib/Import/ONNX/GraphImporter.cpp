//===- GraphImporter.cpp - State of one ONNX graph import -----------------===//
#include "GraphImporter.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {
/// Resource keys must be identifiers ([a-zA-Z_][a-zA-Z0-9_$.]*); ONNX
/// names often are not ("1.weight", "onnx::MatMul_12").
std::string resourceKey(StringRef name) {
  std::string key;
  for (char c : name)
    key += (llvm::isAlnum(c) || c == '_' || c == '.' || c == '$') ? c : '_';
  if (key.empty() || !(llvm::isAlpha(key[0]) || key[0] == '_'))
    key = "_" + key;
  return key;
}
} // namespace

GraphImporter::GraphImporter(ModuleOp module, StringRef fileName, int64_t opset)
    : module(module), builder(module.getContext()),
      moduleBuilder(module.getContext()),
      fileName(StringAttr::get(module.getContext(), fileName)), opset(opset),
      loc(FileLineColLoc::get(this->fileName, 0, 0)) {
  moduleBuilder.setInsertionPointToStart(module.getBody());
}

void GraphImporter::addInitializer(const onnx::TensorProto &tensor) {
  Entry entry;
  entry.initializer = &tensor;
  values[tensor.name()] = std::move(entry);
}

bool GraphImporter::isDefined(StringRef name) const {
  return values.count(name);
}

void GraphImporter::defineValue(StringRef name, Value value) {
  Entry entry;
  entry.value = value;
  values[name] = std::move(entry);
}

void GraphImporter::defineConstant(StringRef name, ConstTensor value) {
  Entry entry;
  entry.constant = std::move(value);
  values[name] = std::move(entry);
}

void GraphImporter::defineUnavailable(StringRef name, StringRef reason) {
  Entry entry;
  entry.unavailableReason = reason.str();
  values[name] = std::move(entry);
}

FailureOr<Value> GraphImporter::valueOf(StringRef name, Location at) {
  auto it = values.find(name);
  if (it == values.end())
    return emitError(at) << "graph output '" << name
                         << "' is not produced by any node, input or "
                            "initializer";
  if (!it->second.unavailableReason.empty())
    return emitError(at) << "graph output '" << name
                         << "': " << it->second.unavailableReason;
  loc = at;
  return materializeEntry(it->second, name);
}

void GraphImporter::finalizeParameters() {
  for (auto &[name, op] : parameters) {
    auto param = cast<ParameterOp>(op);
    if (!isa<FloatType>(param.getType().getElementType()))
      continue;
    auto it = frozen.find(name);
    if (it == frozen.end())
      param.setTrainable(true);
    else
      param->setAttr("gpipe.frozen_reason",
                     StringAttr::get(getContext(), it->second));
  }
  // Frozen initializers that folded into constants leave no parameter; the
  // module keeps their reasons for --emit=summary.
  SmallVector<NamedAttribute> folded;
  for (auto &[name, reason] : frozen)
    if (!parameters.count(name))
      folded.push_back(NamedAttribute(StringAttr::get(getContext(), name),
                                      StringAttr::get(getContext(), reason)));
  if (!folded.empty())
    module->setAttr("gpipe.folded_frozen",
                    DictionaryAttr::get(getContext(), folded));
}

void GraphImporter::recordShapes(
    llvm::StringMap<SmallVector<int64_t>> &out) const {
  for (const auto &[name, e] : values) {
    if (e.value)
      out[name] = SmallVector<int64_t>(
          cast<RankedTensorType>(e.value.getType()).getShape());
    else if (e.constant)
      out[name] = e.constant->shape;
  }
}

bool GraphImporter::isTrainableInitializer(const Entry &entry,
                                           StringRef name) const {
  return entry.initializer && !frozen.count(name) &&
         isFloatDType(static_cast<DType>(entry.initializer->data_type()));
}

void GraphImporter::beginNode(const onnx::NodeProto &n, size_t index) {
  node = &n;
  nodeFailed = false;
  std::string name = n.name().empty() ? "#" + std::to_string(index) : n.name();
  loc = NameLoc::get(StringAttr::get(getContext(), name),
                     FileLineColLoc::get(fileName, 0, 0));
}

InFlightDiagnostic GraphImporter::error() {
  nodeFailed = true;
  return emitError(loc) << node->op_type() << ": ";
}

size_t GraphImporter::numInputs() const { return node->input_size(); }

bool GraphImporter::hasInput(size_t i) const {
  return i < numInputs() && !node->input(i).empty();
}

const std::string &GraphImporter::inputName(size_t i) const {
  return node->input(i);
}

FailureOr<GraphImporter::Entry *> GraphImporter::lookup(size_t i) {
  if (!hasInput(i)) {
    error() << "input " << i << " is required";
    return failure();
  }
  auto it = values.find(inputName(i));
  if (it == values.end()) {
    error() << "input '" << inputName(i) << "' is not defined";
    return failure();
  }
  if (!it->second.unavailableReason.empty()) {
    error() << "input '" << inputName(i)
            << "': " << it->second.unavailableReason;
    return failure();
  }
  return &it->second;
}

FailureOr<Value> GraphImporter::materializeEntry(Entry &entry, StringRef name) {
  if (entry.value)
    return entry.value;
  OpBuilder::InsertionGuard guard(builder);
  if (entry.initializer) {
    const onnx::TensorProto &tensor = *entry.initializer;
    auto type = elementTypeOf(getContext(), tensor.data_type());
    if (!type)
      return emitError(loc) << "initializer '" << name
                            << "': " << llvm::toString(type.takeError());
    if (isFloatDType(static_cast<DType>(tensor.data_type()))) {
      auto bytes = floatTensorBytes(tensor);
      if (!bytes)
        return emitError(loc)
               << "initializer: " << llvm::toString(bytes.takeError());
      auto tensorType = RankedTensorType::get(
          SmallVector<int64_t>(tensor.dims().begin(), tensor.dims().end()),
          *type);
      // Not allocateAndCopyWithAlign: its memcpy would get the null data()
      // of an empty tensor.
      auto blob = HeapAsmResourceBlob::allocate(bytes->size(), alignof(double));
      llvm::copy(*bytes, blob.getMutableData().begin());
      auto value = DenseResourceElementsAttr::get(tensorType, resourceKey(name),
                                                  std::move(blob));
      auto param = moduleBuilder.create<ParameterOp>(
          FileLineColLoc::get(fileName, 0, 0), name, value,
          /*trainable=*/false);
      parameters[name] = param;
      setHoistedInsertionPoint();
      entry.value = builder.create<GetParameterOp>(
          loc, tensorType, FlatSymbolRefAttr::get(param.getSymNameAttr()));
      lastHoisted = entry.value.getDefiningOp();
      return entry.value;
    }
    auto decoded = decodeTensor(tensor);
    if (!decoded)
      return emitError(loc)
             << "initializer: " << llvm::toString(decoded.takeError());
    entry.constant = std::move(*decoded);
  }
  if (!entry.constant)
    return emitError(loc) << "value '" << name << "' has no definition";
  setHoistedInsertionPoint();
  entry.value = materialize(*entry.constant);
  lastHoisted = entry.value.getDefiningOp();
  return entry.value;
}

void GraphImporter::setHoistedInsertionPoint() {
  // Parameters and constants are read at the top of the function body, in
  // order of first use, so that every later use is dominated.
  if (lastHoisted)
    builder.setInsertionPointAfter(lastHoisted);
  else
    builder.setInsertionPointToStart(builder.getInsertionBlock());
}

Value GraphImporter::materialize(const ConstTensor &value) {
  return builder.create<nn::ConstantOp>(loc, value.toAttr(getContext()));
}

FailureOr<Value> GraphImporter::input(size_t i) {
  auto entry = lookup(i);
  if (::mlir::failed(entry))
    return failure();
  auto value = materializeEntry(**entry, inputName(i));
  if (::mlir::failed(value))
    nodeFailed = true;
  return value;
}

FailureOr<SmallVector<Value>> GraphImporter::inputs(size_t n) {
  SmallVector<Value> result;
  for (size_t i = 0; i < n; ++i) {
    if (!hasInput(i))
      continue;
    auto v = input(i);
    if (::mlir::failed(v))
      return failure();
    result.push_back(*v);
  }
  return result;
}

FailureOr<RankedTensorType> GraphImporter::inputType(size_t i) {
  auto entry = lookup(i);
  if (::mlir::failed(entry))
    return failure();
  Entry &e = **entry;
  if (e.value)
    return cast<RankedTensorType>(e.value.getType());
  if (e.initializer) {
    auto type = elementTypeOf(getContext(), e.initializer->data_type());
    if (!type) {
      error() << "input '" << inputName(i)
              << "': " << llvm::toString(type.takeError());
      return failure();
    }
    for (int64_t d : e.initializer->dims())
      if (d < 0 || d > (int64_t(1) << 40)) {
        error() << "initializer '" << inputName(i) << "' has dimension " << d
                << " (0..2^40 allowed)";
        return failure();
      }
    return RankedTensorType::get(
        SmallVector<int64_t>(e.initializer->dims().begin(),
                             e.initializer->dims().end()),
        *type);
  }
  Type elementType = llvm::cantFail(
      elementTypeOf(getContext(), static_cast<int32_t>(e.constant->dtype)));
  return RankedTensorType::get(e.constant->shape, elementType);
}

const ConstTensor *GraphImporter::constantInput(size_t i) {
  if (!hasInput(i))
    return nullptr;
  auto it = values.find(inputName(i));
  if (it == values.end() || !it->second.unavailableReason.empty())
    return nullptr;
  Entry &e = it->second;
  if (!e.constant && isTrainableInitializer(e, inputName(i)))
    return nullptr;
  if (!e.constant && e.initializer) {
    auto decoded = decodeTensor(*e.initializer);
    if (!decoded) {
      error() << llvm::toString(decoded.takeError());
      return nullptr;
    }
    e.constant = std::move(*decoded);
  }
  return e.constant ? &*e.constant : nullptr;
}

FailureOr<const ConstTensor *> GraphImporter::requireConstant(size_t i,
                                                              StringRef what) {
  if (::mlir::failed(lookup(i)))
    return failure();
  markNonTrainable(i, Twine(node->op_type()) + " '" + node->name() +
                          "' reads it as " + what + " at compile time");
  const ConstTensor *c = constantInput(i);
  if (!c) {
    if (!nodeFailed)
      error() << what << " (input '" << inputName(i)
              << "') must be known at compile time (an initializer, a "
                 "Constant, or foldable from static shapes)";
    return failure();
  }
  return c;
}

bool GraphImporter::allInputsConstant() {
  for (size_t i = 0; i < numInputs(); ++i)
    if (hasInput(i) && !constantInput(i))
      return false;
  return true;
}

void GraphImporter::markNonTrainable(size_t i, const Twine &reason) {
  if (!hasInput(i))
    return;
  auto it = values.find(inputName(i));
  if (it != values.end() && it->second.initializer)
    frozen.try_emplace(inputName(i), reason.str());
}

const onnx::AttributeProto *GraphImporter::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node->attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

bool GraphImporter::hasAttr(StringRef name) const { return attr(name); }

namespace {
/// The attribute's type; old producers leave `type` unset.
int attrType(const onnx::AttributeProto &a) {
  if (a.type() != onnx::AttributeProto::UNDEFINED)
    return a.type();
  if (a.ints_size())
    return onnx::AttributeProto::INTS;
  if (a.floats_size())
    return onnx::AttributeProto::FLOATS;
  if (a.has_i())
    return onnx::AttributeProto::INT;
  if (a.has_f())
    return onnx::AttributeProto::FLOAT;
  if (a.has_s())
    return onnx::AttributeProto::STRING;
  if (a.has_t())
    return onnx::AttributeProto::TENSOR;
  return onnx::AttributeProto::UNDEFINED;
}

std::string attrTypeName(int type) {
  if (onnx::AttributeProto_AttributeType_IsValid(type))
    return onnx::AttributeProto_AttributeType_Name(
        static_cast<onnx::AttributeProto_AttributeType>(type));
  return "<invalid attribute type " + std::to_string(type) + ">";
}
} // namespace

int64_t GraphImporter::intAttr(StringRef name, int64_t dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return dflt;
  if (attrType(*a) != onnx::AttributeProto::INT) {
    error() << "attribute '" << name << "' must be INT, got "
            << attrTypeName(attrType(*a));
    return dflt;
  }
  return a->i();
}

float GraphImporter::floatAttr(StringRef name, float dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return dflt;
  if (attrType(*a) != onnx::AttributeProto::FLOAT) {
    error() << "attribute '" << name << "' must be FLOAT, got "
            << attrTypeName(attrType(*a));
    return dflt;
  }
  return a->f();
}

std::string GraphImporter::stringAttr(StringRef name, StringRef dflt) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return dflt.str();
  if (attrType(*a) != onnx::AttributeProto::STRING) {
    error() << "attribute '" << name << "' must be STRING, got "
            << attrTypeName(attrType(*a));
    return dflt.str();
  }
  return a->s();
}

std::optional<SmallVector<int64_t>> GraphImporter::intsAttr(StringRef name) {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::nullopt;
  int type = attrType(*a);
  // An empty list may come without a type from old producers.
  if (type != onnx::AttributeProto::INTS &&
      type != onnx::AttributeProto::UNDEFINED) {
    error() << "attribute '" << name << "' must be INTS, got "
            << attrTypeName(type);
    return std::nullopt;
  }
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

LogicalResult GraphImporter::checkAttrs(ArrayRef<StringRef> known) {
  for (const onnx::AttributeProto &a : node->attribute())
    if (!llvm::is_contained(known, a.name())) {
      error() << "unknown attribute '" << a.name() << "'";
      return failure();
    }
  return success(!nodeFailed);
}

void GraphImporter::define(size_t outputIndex, Entry entry) {
  if (outputIndex >= static_cast<size_t>(node->output_size()))
    return;
  const std::string &name = node->output(outputIndex);
  if (name.empty())
    return;
  values[name] = std::move(entry);
}

void GraphImporter::setOutput(size_t i, Value value) {
  Entry entry;
  entry.value = value;
  define(i, std::move(entry));
}

void GraphImporter::setConstantOutput(size_t i, ConstTensor value) {
  foldedElements += value.numElements();
  if (value.numElements() > kMaxFoldedElements ||
      foldedElements > kMaxFoldedElementsInAll) {
    error() << "folding this node's constant output (" << value.numElements()
            << " elements) takes the model's folded constants past "
            << (value.numElements() > kMaxFoldedElements
                    ? kMaxFoldedElements
                    : kMaxFoldedElementsInAll)
            << " elements; a graph that computes tensors this large from "
               "constants is not supported";
    return;
  }
  Entry entry;
  entry.constant = std::move(value);
  define(i, std::move(entry));
}

void GraphImporter::rejectOutputsFrom(size_t i, StringRef reason) {
  for (size_t k = i; k < static_cast<size_t>(node->output_size()); ++k) {
    Entry entry;
    entry.unavailableReason =
        (node->op_type() + " output " + std::to_string(k) + " (" + reason +
         ") is not supported")
            .str();
    define(k, std::move(entry));
  }
}

FailureOr<Operation *>
GraphImporter::createWithTypes(StringRef opName, ValueRange operands,
                               TypeRange types,
                               ArrayRef<NamedAttribute> attrs) {
  if (nodeFailed)
    return failure();
  OperationState state(loc, opName);
  state.addOperands(operands);
  state.addTypes(types);
  state.addAttributes(attrs);
  Operation *op = builder.create(state);
  if (::mlir::failed(mlir::verify(op))) {
    op->erase();
    nodeFailed = true;
    return failure();
  }
  return op;
}
