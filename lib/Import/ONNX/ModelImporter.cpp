//===- ModelImporter.cpp - ONNX model to the nn dialect -------------------===//
//
// Model-level work: parsing, opset and IR version checks, graph validation
// (unique names, no dangling inputs, no cycles: nodes are imported in a
// topological order), graph inputs with static shapes, dispatch of each node
// to its op importer, graph outputs and their declared types.
//
//===----------------------------------------------------------------------===//
#include "Import/ONNX/ModelImporter.h"

#include "Analysis/BatchPlacement.h"
#include "FreezeByName.h"
#include "GradientReach.h"
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "GPipe/IR/GPipeDialect.h"
#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNDialect.h"
#include "NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MemoryBuffer.h"

#include <google/protobuf/io/coded_stream.h>
#include <queue>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// Largest dimension and element count accepted for graph inputs; keeps
/// shape arithmetic far from overflow.
constexpr int64_t kMaxDim = int64_t(1) << 32;
constexpr int64_t kMaxElements = int64_t(1) << 40;

std::string nodeName(const onnx::NodeProto &node, size_t index) {
  return node.name().empty() ? "#" + std::to_string(index) : node.name();
}

class ModelImporter {
public:
  ModelImporter(const onnx::ModelProto &model, StringRef fileName,
                MLIRContext *context, const ONNXImportOptions &options)
      : model(model), graph(model.graph()), fileName(fileName.str()),
        context(context), options(options),
        fileLoc(FileLineColLoc::get(context, fileName, 0, 0)) {}

  OwningOpRef<ModuleOp> run();

private:
  LogicalResult checkModel();
  LogicalResult sortNodes();
  FailureOr<RankedTensorType> inputType(const onnx::ValueInfoProto &info);
  LogicalResult importNodes(GraphImporter &g);
  LogicalResult
  bindConstantInputs(GraphImporter &g,
                     const llvm::StringMap<const std::string *> &bound);
  LogicalResult checkDeclaredType(const onnx::ValueInfoProto &info,
                                  Type actual);
  InFlightDiagnostic error() { return emitError(fileLoc); }

  const onnx::ModelProto &model;
  const onnx::GraphProto &graph;
  std::string fileName;
  MLIRContext *context;
  const ONNXImportOptions &options;
  Location fileLoc;
  int64_t opset = 0;
  /// Filled and checked for duplicates by sortNodes().
  llvm::StringSet<> initializerNames, inputNames;
  std::vector<size_t> order;
  bool batchOverridden = false;
  int64_t exportBatch = 0; // the static batch of the export, if overridden
  /// The dimension of each graph input that carries the batch.
  llvm::StringMap<int64_t> inputBatchAxes;
  /// Where an import records its values' shapes (the import at the
  /// exported batch), and those shapes once computed.
  llvm::StringMap<SmallVector<int64_t>> *recordShapesInto = nullptr;
  std::optional<llvm::StringMap<SmallVector<int64_t>>> exportShapes;

public:
  /// The shape of `name` at the model's exported batch: imports the model
  /// once more at that batch (errors silenced) on first use.
  const SmallVector<int64_t> *exportShape(StringRef name);
};

const SmallVector<int64_t> *ModelImporter::exportShape(StringRef name) {
  if (!batchOverridden)
    return nullptr;
  if (!exportShapes) {
    exportShapes.emplace();
    ONNXImportOptions exported = options;
    exported.batchSize.reset();
    ScopedDiagnosticHandler silence(context,
                                    [](Diagnostic &) { return success(); });
    ModelImporter shadow(model, fileName, context, exported);
    shadow.recordShapesInto = &*exportShapes;
    (void)shadow.run();
  }
  auto it = exportShapes->find(name);
  return it == exportShapes->end() ? nullptr : &it->second;
}

LogicalResult ModelImporter::checkModel() {
  if (model.ir_version() < 3 || model.ir_version() > 10)
    return error() << "unsupported IR version " << model.ir_version()
                   << " (expected 3..10; is this an ONNX model?)";
  bool found = false;
  for (const onnx::OperatorSetIdProto &id : model.opset_import()) {
    if (id.domain().empty() || id.domain() == "ai.onnx") {
      opset = id.version();
      found = true;
    }
  }
  if (!found)
    return error() << "the model imports no opset of the default ONNX domain";
  if (opset < kMinONNXOpset || opset > kMaxONNXOpset)
    return error() << "opset " << opset << " is out of the supported range "
                   << kMinONNXOpset << ".." << kMaxONNXOpset
                   << " (convert the model to opset 17 or lower with "
                      "onnx.version_converter)";
  if (!model.has_graph())
    return error() << "the model has no graph";
  if (graph.node_size() == 0)
    return error() << "the graph has no nodes";
  if (graph.output_size() == 0)
    return error() << "the graph has no outputs";
  if (graph.sparse_initializer_size() > 0)
    return error() << "sparse initializers are not supported";
  return success();
}

LogicalResult ModelImporter::sortNodes() {
  llvm::StringSet<> available;
  for (const onnx::TensorProto &t : graph.initializer()) {
    if (t.name().empty())
      return error() << "an initializer has no name";
    if (!initializerNames.insert(t.name()).second)
      return error() << "initializer '" << t.name() << "' is defined twice";
    if (llvm::Error err = checkTensor(t))
      return error() << "initializer: " << llvm::toString(std::move(err));
    available.insert(t.name());
  }
  for (const onnx::ValueInfoProto &in : graph.input()) {
    if (in.name().empty())
      return error() << "a graph input has no name";
    if (!inputNames.insert(in.name()).second)
      return error() << "graph input '" << in.name() << "' is listed twice";
    available.insert(in.name());
  }
  size_t n = graph.node_size();
  llvm::StringMap<size_t> producer;
  for (size_t i = 0; i < n; ++i) {
    for (const std::string &out : graph.node(i).output()) {
      if (out.empty())
        continue;
      if (available.count(out))
        return error() << "node '" << nodeName(graph.node(i), i)
                       << "' redefines '" << out
                       << "', which is a graph input or initializer";
      auto [it, inserted] = producer.try_emplace(out, i);
      if (!inserted)
        return error() << "value '" << out << "' is produced by two nodes ('"
                       << nodeName(graph.node(it->second), it->second)
                       << "' and '" << nodeName(graph.node(i), i) << "')";
    }
  }
  // Kahn's algorithm, taking the lowest index first so that sorted graphs
  // keep their order.
  std::vector<size_t> pending(n, 0);
  std::vector<std::vector<size_t>> users(n);
  for (size_t i = 0; i < n; ++i) {
    for (const std::string &in : graph.node(i).input()) {
      if (in.empty() || available.count(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return error() << "node '" << nodeName(graph.node(i), i) << "' ("
                       << graph.node(i).op_type() << ") reads '" << in
                       << "', which is not a graph input, an initializer or "
                          "the output of any node";
      ++pending[i];
      users[it->second].push_back(i);
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < n; ++i)
    if (!pending[i])
      ready.push(i);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t user : users[i])
      if (--pending[user] == 0)
        ready.push(user);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (pending[i])
        return error() << "the graph has a cycle through node '"
                       << nodeName(graph.node(i), i) << "' ("
                       << graph.node(i).op_type() << ")";
  }
  for (const onnx::ValueInfoProto &out : graph.output())
    if (out.name().empty() ||
        (!available.count(out.name()) && !producer.count(out.name())))
      return error() << "graph output '" << out.name()
                     << "' is not produced by any node, input or "
                        "initializer";
  return success();
}

/// The dimension of graph input `info` that carries the batch: the one
/// --batch-axis names for it, else the symbolic one named like the batch
/// ('batch...', 'N' or 'B': dynamic_axes={'src': {1: 'batch'}}), else a
/// symbolic first dimension, else the first. The others must be static.
static FailureOr<int64_t> batchAxisOf(const onnx::ValueInfoProto &info,
                                      const ONNXImportOptions &options,
                                      Location loc) {
  const std::string &name = info.name();
  const onnx::TensorShapeProto &shape = info.type().tensor_type().shape();
  int64_t rank = shape.dim_size();
  std::optional<int64_t> flag;
  for (const auto &[input, axis] : options.batchAxes)
    if (input == name || (input.empty() && !flag))
      flag = axis;
  SmallVector<int64_t> symbolic, named;
  for (int64_t i = 0; i < rank; ++i) {
    const auto &dim = shape.dim(static_cast<int>(i));
    if (dim.has_dim_value())
      continue;
    symbolic.push_back(i);
    StringRef param = dim.dim_param();
    if (param.contains_insensitive("batch") || param == "N" || param == "B")
      named.push_back(i);
  }
  auto label = [&](int64_t i) {
    const auto &dim = shape.dim(static_cast<int>(i));
    return dim.has_dim_param() ? "'" + dim.dim_param() + "'"
                               : std::string("(unnamed)");
  };
  std::optional<int64_t> axis;
  std::string how;
  if (flag) {
    axis = *flag < 0 ? *flag + rank : *flag;
    if (*axis < 0 || *axis >= rank)
      return emitError(loc) << "--batch-axis=" << *flag
                            << " is not a dimension of graph input '" << name
                            << "' (rank " << rank << ")";
    how = ", by --batch-axis";
  } else if (named.size() == 1) {
    axis = named.front();
    how = ", named like the batch";
  } else if (symbolic.empty() || symbolic.front() == 0) {
    axis = 0;
  } else {
    std::string dims;
    for (int64_t i : symbolic)
      dims += (dims.empty() ? "" : ", ") + std::to_string(i) + " " + label(i);
    return emitError(loc)
           << "graph input '" << name << "' has symbolic dimension"
           << (symbolic.size() > 1 ? "s " : " ") << dims
           << " and gpipe needs every dimension but the batch static: "
              "export the others static, and name the batch dimension "
              "'batch' (dynamic_axes={'"
           << name << "': {K: 'batch'}}) or pass --batch-axis=" << name
           << ":K where it is not the first";
  }
  for (int64_t i : symbolic)
    if (i != *axis)
      return emitError(loc)
             << "graph input '" << name << "' dimension " << i
             << " is symbolic " << label(i) << "; only the batch dimension ("
             << *axis << how << ") may be: export it static";
  return *axis;
}

FailureOr<RankedTensorType>
ModelImporter::inputType(const onnx::ValueInfoProto &info) {
  const std::string &name = info.name();
  if (!info.type().has_tensor_type())
    return error() << "graph input '" << name << "' is not a tensor";
  const onnx::TypeProto::Tensor &tensor = info.type().tensor_type();
  auto elementType = elementTypeOf(context, tensor.elem_type());
  if (!elementType)
    return error() << "graph input '" << name
                   << "': " << llvm::toString(elementType.takeError());
  if (!tensor.has_shape())
    return error() << "graph input '" << name
                   << "' has no shape; gpipe needs static shapes";
  FailureOr<int64_t> batchAxis = batchAxisOf(info, options, fileLoc);
  if (failed(batchAxis))
    return failure();
  inputBatchAxes[name] = *batchAxis;
  SmallVector<int64_t> shape;
  bool symbolic = false;
  for (int i = 0; i < tensor.shape().dim_size(); ++i) {
    const auto &dim = tensor.shape().dim(i);
    if (dim.has_dim_value() && dim.dim_value() > 0) {
      if (dim.dim_value() > kMaxDim)
        return error() << "graph input '" << name << "' dimension " << i
                       << " is too large (" << dim.dim_value() << ")";
      shape.push_back(dim.dim_value());
      continue;
    }
    if (dim.has_dim_value() && dim.dim_value() < 0)
      return error() << "graph input '" << name << "' has negative dimension "
                     << dim.dim_value();
    if (dim.has_dim_value() && dim.dim_value() == 0)
      return error() << "graph input '" << name << "' has a zero dimension";
    std::string label =
        dim.has_dim_param() ? "'" + dim.dim_param() + "'" : "(unnamed)";
    if (!options.batchSize)
      return error() << "graph input '" << name
                     << "' has a symbolic batch dimension " << label
                     << "; pass --batch-size=N";
    symbolic = true;
    shape.push_back(*options.batchSize);
  }
  if (options.batchSize && !symbolic && !shape.empty() &&
      shape[*batchAxis] != *options.batchSize) {
    exportBatch = shape[*batchAxis];
    shape[*batchAxis] = *options.batchSize;
    batchOverridden = true;
  }
  int64_t count = 1;
  for (int64_t d : shape) {
    if (count > kMaxElements / d)
      return error() << "graph input '" << name
                     << "' has more than 2^40 "
                        "elements";
    count *= d;
  }
  return RankedTensorType::get(shape, *elementType);
}

/// A static-batch export compiled at another batch: the inputs of a
/// broadcasting op or a Concat that still hold the exported batch get the
/// compiled one where that is exact (GraphImporter::rebatchInputs).
static LogicalResult rebatchInputs(GraphImporter &g,
                                   const onnx::NodeProto &node) {
  static const llvm::StringSet<> broadcasting = {"Add",
                                                 "Sub",
                                                 "Mul",
                                                 "Div",
                                                 "Pow",
                                                 "Where",
                                                 "Equal",
                                                 "Less",
                                                 "Greater",
                                                 "LessOrEqual",
                                                 "GreaterOrEqual",
                                                 "And",
                                                 "Or",
                                                 "Xor",
                                                 "Mod",
                                                 "Max",
                                                 "Min",
                                                 "Sum",
                                                 "Mean",
                                                 "PRelu"};
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return success();
  if (broadcasting.contains(node.op_type()))
    return g.rebatchInputs(std::nullopt);
  if (node.op_type() != "Concat")
    return success();
  auto type = g.inputType(0);
  if (failed(type))
    return success(); // the importer reports it
  int64_t rank = type->getRank(), axis = g.intAttr("axis", 0);
  return g.rebatchInputs(axis < 0 ? axis + rank : axis);
}

LogicalResult ModelImporter::importNodes(GraphImporter &g) {
  const OpImporterTable &table = getOpImporterTable();
  for (size_t index : order) {
    const onnx::NodeProto &node = graph.node(index);
    g.beginNode(node, index);
    std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    int64_t domainOpset = opset;
    if (!domain.empty()) {
      domainOpset = -1;
      for (const onnx::OperatorSetIdProto &id : model.opset_import())
        if (id.domain() == domain)
          domainOpset = id.version();
    }
    const OpImporter *importer =
        table.lookup(domain, node.op_type(), domainOpset);
    std::string qualified =
        domain.empty() ? node.op_type() : domain + "." + node.op_type();
    if (!importer) {
      int minVersion = table.minVersion(domain, node.op_type());
      if (minVersion > 0)
        return emitError(g.getLoc())
               << "op '" << qualified << "' in node '" << nodeName(node, index)
               << "' needs opset >= " << minVersion
               << " but the model has opset " << domainOpset;
      return emitError(g.getLoc())
             << "unsupported op '" << qualified << "' in node '"
             << nodeName(node, index) << "' (opset " << domainOpset
             << "); supported ops: " << table.supportedOps();
    }
    if (batchOverridden && failed(rebatchInputs(g, node)))
      return failure();
    if (failed(importer->import(g)) || g.failed()) {
      if (!g.failed())
        emitError(g.getLoc()) << qualified << ": import failed";
      return failure();
    }
    for (const std::string &out : node.output())
      if (!out.empty() && !g.isDefined(out))
        return emitError(g.getLoc())
               << qualified << ": output '" << out << "' was not produced";
    // Ops other than Reshape keep the batch's place inside its dimension
    // (tracked only for a static-batch export compiled at another batch).
    if (!batchOverridden)
      continue;
    std::optional<int64_t> inner;
    for (const std::string &in : node.input())
      if (!inner && !in.empty())
        inner = g.batchInner(in);
    if (inner)
      for (const std::string &out : node.output())
        if (!out.empty() && !g.batchInner(out))
          g.setBatchInner(out, *inner);
  }
  return success();
}

LogicalResult ModelImporter::checkDeclaredType(const onnx::ValueInfoProto &info,
                                               Type actual) {
  if (!info.type().has_tensor_type())
    return success();
  const onnx::TypeProto::Tensor &tensor = info.type().tensor_type();
  auto type = cast<RankedTensorType>(actual);
  if (tensor.elem_type() != 0) {
    auto declared = elementTypeOf(context, tensor.elem_type());
    if (!declared)
      return error() << "graph output '" << info.name()
                     << "': " << llvm::toString(declared.takeError());
    if (*declared != type.getElementType())
      return error() << "graph output '" << info.name() << "' is declared "
                     << *declared << " but computes " << type.getElementType();
  }
  if (!tensor.has_shape())
    return success();
  if (tensor.shape().dim_size() != type.getRank())
    return error() << "graph output '" << info.name() << "' is declared with "
                   << "rank " << tensor.shape().dim_size() << " but computes "
                   << type;
  // A static-batch export compiled at another batch: the one dimension
  // that carries the batch (or the batch folded with others) scales by it.
  bool scaled = false;
  for (int i = 0; i < tensor.shape().dim_size(); ++i) {
    const auto &dim = tensor.shape().dim(i);
    if (!dim.has_dim_value() || dim.dim_value() == type.getDimSize(i))
      continue;
    if (batchOverridden && !scaled && dim.dim_value() % exportBatch == 0 &&
        dim.dim_value() / exportBatch * *options.batchSize ==
            type.getDimSize(i)) {
      scaled = true;
      continue;
    }
    return error() << "graph output '" << info.name()
                   << "' is declared with dimension " << i << " = "
                   << dim.dim_value() << " but computes " << type;
  }
  return success();
}

LogicalResult ModelImporter::bindConstantInputs(
    GraphImporter &g, const llvm::StringMap<const std::string *> &bound) {
  for (const onnx::ValueInfoProto &in : graph.input()) {
    auto it = bound.find(in.name());
    if (it == bound.end())
      continue;
    onnx::TensorProto tensor;
    if (!tensor.ParseFromString(*it->second))
      return error() << "--const-input '" << in.name()
                     << "': not a serialized ONNX TensorProto";
    auto value = decodeTensor(tensor);
    if (!value)
      return error() << "--const-input '" << in.name()
                     << "': " << llvm::toString(value.takeError());
    const onnx::TypeProto::Tensor &declared = in.type().tensor_type();
    bool matches = declared.elem_type() == tensor.data_type();
    if (declared.has_shape()) {
      const onnx::TensorShapeProto &shape = declared.shape();
      matches &= shape.dim_size() == static_cast<int>(value->shape.size());
      for (int i = 0; matches && i < shape.dim_size(); ++i)
        matches &= !shape.dim(i).has_dim_value() ||
                   shape.dim(i).dim_value() == value->shape[i];
    }
    if (!matches)
      return error() << "--const-input '" << in.name()
                     << "': the tensor's type or shape differs from the "
                        "graph input's declaration";
    g.defineConstant(in.name(), std::move(*value));
  }
  return success();
}

OwningOpRef<ModuleOp> ModelImporter::run() {
  if (failed(checkModel()) || failed(sortNodes()))
    return nullptr;
  context->loadDialect<func::FuncDialect, nn::NNDialect, GPipeDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  Builder b(context);
  std::string modelName = graph.name().empty() ? "model" : graph.name();
  (*module)->setAttr("gpipe.model_name", b.getStringAttr(modelName));
  (*module)->setAttr("gpipe.onnx_opset", b.getI64IntegerAttr(opset));
  if (!model.producer_name().empty())
    (*module)->setAttr("gpipe.producer",
                       b.getStringAttr(model.producer_name() + " " +
                                       model.producer_version()));

  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  llvm::StringMap<const std::string *> constantInputs;
  for (const auto &[name, bytes] : options.constantInputs) {
    if (!inputNames.count(name)) {
      error() << "--const-input names '" << name
              << "', which is not a graph input";
      return nullptr;
    }
    constantInputs[name] = &bytes;
  }
  for (const auto &[name, axis] : options.batchAxes) {
    bool data = !name.empty() && inputNames.count(name) &&
                !initializerNames.count(name) && !constantInputs.count(name);
    if (!name.empty() && !data) {
      error() << "--batch-axis=" << name << ":" << axis << " names '" << name
              << "', which is not a data input of the graph";
      return nullptr;
    }
  }
  for (const onnx::ValueInfoProto &in : graph.input()) {
    if (initializerNames.count(in.name()) || constantInputs.count(in.name()))
      continue; // An initializer with a default: a parameter.
    auto type = inputType(in);
    if (failed(type))
      return nullptr;
    // The phases take every input batch-first; the graph sees its own
    // layout through a transpose (below).
    SmallVector<int64_t> shape(type->getShape());
    int64_t axis = inputBatchAxes.lookup(in.name());
    if (axis != 0) {
      int64_t batch = shape[axis];
      shape.erase(shape.begin() + axis);
      shape.insert(shape.begin(), batch);
    }
    argTypes.push_back(RankedTensorType::get(shape, type->getElementType()));
    argNames.push_back(in.name());
  }

  auto func =
      func::FuncOp::create(fileLoc, "forward", b.getFunctionType(argTypes, {}));
  module->push_back(func);
  Block *body = func.addEntryBlock();
  GraphImporter g(*module, fileName, opset);
  g.getBuilder().setInsertionPointToEnd(body);
  for (const onnx::TensorProto &t : graph.initializer())
    g.addInitializer(t);
  // The user's names first: their reason is the one the summary shows.
  auto named =
      initializersFrozenByName(graph, options.freeze, options.trainable);
  if (!named) {
    error() << llvm::toString(named.takeError());
    return nullptr;
  }
  for (auto &[name, reason] : *named)
    g.freezeInitializer(name, reason);
  for (auto &[name, reason] : initializersWithoutGradient(graph))
    g.freezeInitializer(name, reason);
  if (failed(bindConstantInputs(g, constantInputs)))
    return nullptr;
  SmallVector<NamedAttribute> dataBatchAxes;
  for (auto [i, name] : llvm::enumerate(argNames)) {
    Value arg = body->getArgument(i);
    func.setArgAttr(i, "gpipe.name", b.getStringAttr(name));
    int64_t axis = inputBatchAxes.lookup(name);
    if (axis == 0) {
      g.defineValue(name, arg);
      continue;
    }
    // [B, ...] to the model's [..., B, ...].
    SmallVector<int64_t> perm = batchToAxisPermutation(
        cast<RankedTensorType>(arg.getType()).getRank(), axis);
    Value layout = g.getBuilder().create<nn::TransposeOp>(
        NameLoc::get(b.getStringAttr(name), fileLoc), ValueRange{arg},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("perm", b.getDenseI64ArrayAttr(perm))});
    g.defineValue(name, layout);
    dataBatchAxes.push_back(b.getNamedAttr(name, b.getI64IntegerAttr(axis)));
  }
  if (!dataBatchAxes.empty())
    (*module)->setAttr(kDataBatchAxesAttrName,
                       b.getDictionaryAttr(dataBatchAxes));
  g.setExportShapes([this](StringRef name) { return exportShape(name); });
  if (batchOverridden)
    g.setBatches(exportBatch, *options.batchSize);
  LogicalResult imported = importNodes(g);
  if (recordShapesInto)
    g.recordShapes(*recordShapesInto);
  if (failed(imported))
    return nullptr;

  SmallVector<Value> results;
  for (const onnx::ValueInfoProto &out : graph.output()) {
    auto value = g.valueOf(out.name(), fileLoc);
    if (failed(value) || failed(checkDeclaredType(out, value->getType())))
      return nullptr;
    results.push_back(*value);
  }
  OpBuilder::atBlockEnd(body).create<func::ReturnOp>(fileLoc, results);
  // Node outputs nothing reads (e.g. BatchNorm running statistics of a
  // training export) leave dead ops behind; users go before producers.
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(body->getOperations())))
    if (isOpTriviallyDead(&op))
      op.erase();
  func.setType(b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (auto [i, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "gpipe.name", b.getStringAttr(out.name()));
  g.finalizeParameters();
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

constexpr const char *kNotAModel =
    "not a valid ONNX model (protobuf parse failed: the file is truncated, "
    "corrupt or not an ONNX ModelProto)";

/// Parses a whole ModelProto; false when the bytes are not one.
bool parseModelProto(StringRef bytes, onnx::ModelProto &model) {
  if (bytes.size() > INT32_MAX)
    return false;
  google::protobuf::io::CodedInputStream stream(
      reinterpret_cast<const uint8_t *>(bytes.data()),
      static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(INT32_MAX);
  // Deep nesting in corrupt input must fail, not exhaust the stack.
  stream.SetRecursionLimit(64);
  return model.ParseFromCodedStream(&stream) && stream.ConsumedEntireMessage();
}
} // namespace

OwningOpRef<ModuleOp> gpipe::importONNXModel(StringRef bytes,
                                             StringRef fileName,
                                             MLIRContext *context,
                                             const ONNXImportOptions &options) {
  Location loc = FileLineColLoc::get(context, fileName, 0, 0);
  if (bytes.empty()) {
    emitError(loc) << "the file is empty";
    return nullptr;
  }
  if (options.batchSize &&
      (*options.batchSize <= 0 || *options.batchSize > kMaxDim)) {
    emitError(loc) << "--batch-size must be in 1.." << kMaxDim;
    return nullptr;
  }
  onnx::ModelProto model;
  if (!parseModelProto(bytes, model)) {
    emitError(loc) << kNotAModel;
    return nullptr;
  }
  return ModelImporter(model, fileName, context, options).run();
}

OwningOpRef<ModuleOp> gpipe::importONNXFile(StringRef path,
                                            MLIRContext *context,
                                            const ONNXImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(context, path, 0, 0))
        << "cannot read the file: " << buffer.getError().message();
    return nullptr;
  }
  return importONNXModel((*buffer)->getBuffer(), path, context, options);
}

FailureOr<std::optional<int64_t>>
gpipe::onnxStaticBatch(StringRef path, MLIRContext *context,
                       const ONNXImportOptions &options) {
  Location loc = FileLineColLoc::get(context, path, 0, 0);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return emitError(loc) << "cannot read the file: "
                          << buffer.getError().message();
  onnx::ModelProto model;
  if ((*buffer)->getBufferSize() == 0)
    return emitError(loc) << "the file is empty";
  if (!parseModelProto((*buffer)->getBuffer(), model))
    return emitError(loc) << kNotAModel;
  llvm::StringSet<> initializers;
  for (const onnx::TensorProto &t : model.graph().initializer())
    initializers.insert(t.name());
  for (const auto &[name, bytes] : options.constantInputs)
    initializers.insert(name); // --const-input: not data either
  for (const onnx::ValueInfoProto &in : model.graph().input()) {
    if (initializers.count(in.name()))
      continue;
    const auto &shape = in.type().tensor_type().shape();
    FailureOr<int64_t> axis = batchAxisOf(in, options, loc);
    if (failed(axis))
      return failure();
    int a = static_cast<int>(*axis);
    if (shape.dim_size() == 0 || !shape.dim(a).has_dim_value() ||
        shape.dim(a).dim_value() <= 0)
      return std::optional<int64_t>();
    return std::optional<int64_t>(shape.dim(a).dim_value());
  }
  return std::optional<int64_t>();
}

std::string gpipe::supportedONNXOps() {
  return getOpImporterTable().supportedOps();
}

std::string gpipe::protobufVersion() {
  return "protobuf " +
         google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION);
}

void gpipe::registerONNXImportDialects(DialectRegistry &registry) {
  registry.insert<func::FuncDialect, nn::NNDialect, GPipeDialect>();
}
