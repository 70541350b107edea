//===- GraphImporter.h - State of one ONNX graph import ---------*- C++ -*-===//
//
// What an op importer sees: the node being imported, its inputs as MLIR
// values or as compile-time constants, typed attribute accessors, and the
// creation of nn ops with inferred result types. Every failure is reported
// as a diagnostic located at the node; nothing asserts on bad input.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_GRAPHIMPORTER_H
#define GPIPE_LIB_IMPORT_ONNX_GRAPHIMPORTER_H

#include "ConstTensor.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <functional>
#include <optional>

namespace onnx {
class AttributeProto;
class NodeProto;
class TensorProto;
} // namespace onnx

namespace gpipe::onnx_import {

class GraphImporter {
public:
  GraphImporter(mlir::ModuleOp module, llvm::StringRef fileName, int64_t opset);

  mlir::MLIRContext *getContext() { return module.getContext(); }
  mlir::OpBuilder &getBuilder() { return builder; }
  int64_t getOpset() const { return opset; }

  //===--------------------------------------------------------------------===//
  // Graph-level state, set up by the model importer.
  //===--------------------------------------------------------------------===//

  void addInitializer(const onnx::TensorProto &tensor);
  bool isDefined(llvm::StringRef name) const;
  void defineValue(llvm::StringRef name, mlir::Value value);
  void defineConstant(llvm::StringRef name, ConstTensor value);
  /// Names produced by a node but not usable (e.g. BatchNorm's running-stat
  /// outputs); a later use reports `reason`.
  void defineUnavailable(llvm::StringRef name, llvm::StringRef reason);
  /// A graph output as a value (constants are materialized).
  mlir::FailureOr<mlir::Value> valueOf(llvm::StringRef name,
                                       mlir::Location loc);
  /// Marks trainable parameters: every floating-point initializer but those
  /// marked frozen, which get their reason as `gpipe.frozen_reason`.
  void finalizeParameters();
  /// The static shape of every value and constant defined so far, by name.
  void recordShapes(llvm::StringMap<llvm::SmallVector<int64_t>> &out) const;
  /// For a model exported with a static batch and compiled for another:
  /// the shape a named value has at the exported batch (from an import at
  /// that batch), or null when unknown or when the batch is the exported one.
  using ExportShapeFn =
      std::function<const llvm::SmallVector<int64_t> *(llvm::StringRef)>;
  void setExportShapes(ExportShapeFn fn) { exportShapes = std::move(fn); }
  /// The batch of the export and the batch compiled for, when they differ.
  void setBatches(int64_t exported, int64_t compiled) {
    exportBatch = exported;
    compiledBatch = compiled;
  }
  int64_t getExportBatch() const { return exportBatch; }
  int64_t getCompiledBatch() const { return compiledBatch; }
  /// Where the batch sits inside the dimension that carries it: the
  /// product of that dimension's factors inside (after) the batch; 1 for
  /// a dimension that is the batch, recorded by the Reshapes that fold it
  /// and passed on to the outputs of the ops that keep it.
  std::optional<int64_t> batchInner(llvm::StringRef name) const {
    auto it = batchInners.find(name);
    return it == batchInners.end() ? std::nullopt
                                   : std::optional<int64_t>(it->second);
  }
  void setBatchInner(llvm::StringRef name, int64_t inner) {
    batchInners[name] = inner;
  }
  const llvm::SmallVector<int64_t> *exportShape(llvm::StringRef name) {
    return exportShapes ? exportShapes(name) : nullptr;
  }
  /// Before a broadcasting op or a Concat (`concatAxis`) of a static-batch
  /// export compiled at another batch: inputs that still hold the exported
  /// batch where another input holds the compiled one (a constant the same
  /// for every sample, a broadcast along the batch) get the compiled batch;
  /// a constant with per-sample values is an error (StaticBatch.cpp).
  mlir::LogicalResult rebatchInputs(std::optional<int64_t> concatAxis);
  /// Input `i`, a constant holding the exported batch on `axis` (`inner`
  /// elements of that axis inside each sample), gets the compiled batch
  /// (an Expand to a shape read at the compiled batch: a zero initial
  /// state of nn.GRU); an error when its samples differ.
  mlir::LogicalResult rebatchConstantInput(size_t i, int64_t axis,
                                           int64_t inner);

  //===--------------------------------------------------------------------===//
  // The node being imported.
  //===--------------------------------------------------------------------===//

  void beginNode(const onnx::NodeProto &node, size_t index);
  const onnx::NodeProto &getNode() const { return *node; }
  mlir::Location getLoc() const { return loc; }
  /// An error at the node, prefixed with its op type.
  mlir::InFlightDiagnostic error();

  size_t numInputs() const;
  /// Whether input `i` is present (ONNX marks omitted optional inputs "").
  bool hasInput(size_t i) const;
  /// Input `i` as an SSA value; compile-time constants are materialized as
  /// nn.constant or gpipe.get_parameter.
  mlir::FailureOr<mlir::Value> input(size_t i);
  /// The present inputs among [0, n) as values (absent optional ones are
  /// skipped).
  mlir::FailureOr<llvm::SmallVector<mlir::Value>> inputs(size_t n);
  /// The static type of input `i`, without materializing constants.
  mlir::FailureOr<mlir::RankedTensorType> inputType(size_t i);
  /// Input `i` if its value is known at compile time, else null. A
  /// trainable initializer is never known at compile time: an op on it
  /// stays an op (folding it would freeze the parameter).
  const ConstTensor *constantInput(size_t i);
  /// Input `i`, which must be known at compile time (`what` names it); an
  /// initializer read this way is frozen, with that as its reason.
  mlir::FailureOr<const ConstTensor *> requireConstant(size_t i,
                                                       llvm::StringRef what);
  /// Whether every present input is known at compile time.
  bool allInputsConstant();
  /// Input `i`, if it is an initializer, is model state that is not
  /// trained; `reason` says why (--emit=summary lists it).
  void markNonTrainable(size_t i, const llvm::Twine &reason);
  /// The initializer `name` is model state that is not trained (and may
  /// fold into constants); `reason` says why.
  void freezeInitializer(llvm::StringRef name, llvm::StringRef reason) {
    frozen.try_emplace(name, reason.str());
  }

  /// Attribute accessors. A present attribute of the wrong type is an error
  /// (reported once; `failed()` then turns true) and yields the default.
  bool hasAttr(llvm::StringRef name) const;
  int64_t intAttr(llvm::StringRef name, int64_t dflt);
  float floatAttr(llvm::StringRef name, float dflt);
  std::string stringAttr(llvm::StringRef name, llvm::StringRef dflt);
  std::optional<llvm::SmallVector<int64_t>> intsAttr(llvm::StringRef name);
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  /// Fails if an attribute outside `known` is present.
  mlir::LogicalResult checkAttrs(llvm::ArrayRef<llvm::StringRef> known);
  bool failed() const { return nodeFailed; }

  void setOutput(size_t i, mlir::Value value);
  void setConstantOutput(size_t i, ConstTensor value);
  /// Outputs from `i` on are rejected if another node or the graph uses them.
  void rejectOutputsFrom(size_t i, llvm::StringRef reason);

  /// Creates a type-inferring op at the node; verifies it.
  template <typename OpTy>
  mlir::FailureOr<mlir::Operation *>
  create(mlir::ValueRange operands,
         llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    if (nodeFailed)
      return mlir::failure();
    // Inference reads operands by position: an op of fixed arity built on
    // fewer values (an empty name given for a required input) is refused
    // here, before inference would read past the range.
    if (std::optional<size_t> arity = fixedArity<OpTy>();
        arity && *arity != operands.size()) {
      error() << "needs " << *arity << " input" << (*arity == 1 ? "" : "s")
              << ", the node gives " << operands.size()
              << " (an empty input name stands for an absent input)";
      nodeFailed = true;
      return mlir::failure();
    }
    llvm::SmallVector<mlir::Type> types;
    mlir::DictionaryAttr dict = mlir::DictionaryAttr::get(getContext(), attrs);
    if (mlir::failed(OpTy::inferReturnTypes(getContext(), loc, operands, dict,
                                            mlir::OpaqueProperties(nullptr),
                                            mlir::RegionRange(), types))) {
      nodeFailed = true; // inference reported the reason at the node
      return mlir::failure();
    }
    return createWithTypes(OpTy::getOperationName(), operands, types, attrs);
  }
  /// Same with single result; an op that folds to a value it was given (a
  /// pad of nothing) is not created: that value stands for it, as with
  /// OpBuilder::createOrFold.
  template <typename OpTy>
  mlir::FailureOr<mlir::Value>
  createValue(mlir::ValueRange operands,
              llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    auto op = create<OpTy>(operands, attrs);
    if (mlir::failed(op))
      return mlir::failure();
    llvm::SmallVector<mlir::OpFoldResult, 1> folded;
    if (mlir::succeeded((*op)->fold(folded)) && folded.size() == 1)
      if (auto value = llvm::dyn_cast<mlir::Value>(folded.front())) {
        (*op)->erase();
        return value;
      }
    return (*op)->getResult(0);
  }
  mlir::FailureOr<mlir::Operation *>
  createWithTypes(llvm::StringRef opName, mlir::ValueRange operands,
                  mlir::TypeRange types,
                  llvm::ArrayRef<mlir::NamedAttribute> attrs);

  /// nn.constant of a folded tensor.
  mlir::Value materialize(const ConstTensor &value);

  mlir::NamedAttribute named(llvm::StringRef name, mlir::Attribute value) {
    return builder.getNamedAttr(name, value);
  }

private:
  /// The operand count of an op of fixed arity; nullopt for variadic ops
  /// (their verifier checks).
  template <typename OpTy> static constexpr std::optional<size_t> fixedArity() {
    using namespace mlir::OpTrait;
    if constexpr (OpTy::template hasTrait<ZeroOperands>())
      return 0;
    else if constexpr (OpTy::template hasTrait<OneOperand>())
      return 1;
    else if constexpr (OpTy::template hasTrait<NOperands<2>::Impl>())
      return 2;
    else if constexpr (OpTy::template hasTrait<NOperands<3>::Impl>())
      return 3;
    else if constexpr (OpTy::template hasTrait<NOperands<4>::Impl>())
      return 4;
    else if constexpr (OpTy::template hasTrait<NOperands<5>::Impl>())
      return 5;
    else
      return std::nullopt;
  }

  struct Entry {
    mlir::Value value;
    std::optional<ConstTensor> constant;
    const onnx::TensorProto *initializer = nullptr;
    std::string unavailableReason;
  };
  mlir::FailureOr<Entry *> lookup(size_t i);
  mlir::FailureOr<mlir::Value> materializeEntry(Entry &entry,
                                                llvm::StringRef name);
  const std::string &inputName(size_t i) const;
  void setHoistedInsertionPoint();
  void define(size_t outputIndex, Entry entry);

  mlir::ModuleOp module;
  mlir::OpBuilder builder;
  mlir::OpBuilder moduleBuilder;
  mlir::StringAttr fileName;
  int64_t opset;
  llvm::StringMap<Entry> values;
  /// Initializers that are not trained, with the reason (the first given).
  llvm::StringMap<std::string> frozen;
  ExportShapeFn exportShapes;
  int64_t exportBatch = 0, compiledBatch = 0;
  llvm::StringMap<int64_t> batchInners;
  bool isTrainableInitializer(const Entry &entry, llvm::StringRef name) const;
  llvm::StringMap<mlir::Operation *> parameters;

  const onnx::NodeProto *node = nullptr;
  mlir::Location loc;
  bool nodeFailed = false;
  /// Elements of every constant folded so far (bounded: the importer's
  /// memory).
  int64_t foldedElements = 0;
  mlir::Operation *lastHoisted = nullptr;
};

/// `x` as `shape` (same elements); `x` itself when it has that shape.
mlir::FailureOr<mlir::Value> reshapeTo(GraphImporter &g, mlir::Value x,
                                       llvm::ArrayRef<int64_t> shape);

/// `x` (of shape `unit` without its unit axes) with a unit axis where
/// each repeat goes, broadcast to `expanded` and reshaped to `out`: Tile's
/// and nearest Resize's copies, whose gradient sums them.
mlir::FailureOr<mlir::Value> copiesAlongUnitAxes(
    GraphImporter &g, mlir::Value x, llvm::ArrayRef<int64_t> unit,
    llvm::ArrayRef<int64_t> expanded, llvm::ArrayRef<int64_t> out);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_GRAPHIMPORTER_H
