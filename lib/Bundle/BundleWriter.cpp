//===- BundleWriter.cpp - Writing gpipe bundles ---------------------------===//
#include "Bundle/BundleWriter.h"

#include "Bundle/StageWiring.h"
#include "GPipe/IR/GPipeOps.h"
#include "Target/Native/NativeCodegen.h"
#include "Target/StageTarget.h"

#include "gpipe/common/DType.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CRC.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace gpipe;
namespace json = llvm::json;

namespace {

/// "f32" -> "float32": the manifest uses NumPy's names.
std::string dtypeName(StringRef mlirName) {
  std::optional<DType> dtype = dtypeFromMlirName(mlirName.str());
  return dtype ? std::string(gpipe::dtypeName(*dtype)) : mlirName.str();
}

std::string typeName(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return dtypeName(s);
}

/// Builtin attributes of the kinds nn ops and the stage plan use, as JSON.
json::Value toJSON(Attribute attr) {
  if (auto role = dyn_cast<gpipe::RoleAttr>(attr))
    return std::string(roleName(role.getValue()));
  if (auto b = dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getValue().getSExtValue();
  if (auto f = dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(attr)) {
    // Element types of the plan use MLIR spellings.
    return s.getValue().str();
  }
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr))
    return json::Array(a.asArrayRef());
  if (auto a = dyn_cast<ArrayAttr>(attr)) {
    json::Array out;
    for (Attribute e : a)
      out.push_back(toJSON(e));
    return out;
  }
  if (auto d = dyn_cast<DictionaryAttr>(attr)) {
    json::Object out;
    for (NamedAttribute n : d) {
      json::Value v = toJSON(n.getValue());
      if (n.getName() == "dtype")
        if (auto s = v.getAsString())
          v = dtypeName(*s);
      out[n.getName().getValue()] = std::move(v);
    }
    return out;
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << attr;
  return s;
}

/// The raw little-endian bytes of a parameter's value, one byte per bool,
/// splats expanded.
FailureOr<std::vector<char>> valueBytes(gpipe::ParameterOp param) {
  Attribute value = param.getValue();
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(value)) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return param.emitError("parameter value resource has no data");
    ArrayRef<char> data = blob->getData();
    return std::vector<char>(data.begin(), data.end());
  }
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense)
    return param.emitError("unsupported parameter value kind");
  int64_t count = dense.getNumElements();
  if (dense.getElementType().isInteger(1)) {
    std::vector<char> bytes;
    for (bool b : dense.getValues<bool>())
      bytes.push_back(b ? 1 : 0);
    return bytes;
  }
  ArrayRef<char> raw = dense.getRawData();
  if (!dense.isSplat())
    return std::vector<char>(raw.begin(), raw.end());
  std::vector<char> bytes;
  bytes.reserve(raw.size() * count);
  for (int64_t i = 0; i < count; ++i)
    bytes.insert(bytes.end(), raw.begin(), raw.end());
  return bytes;
}

LogicalResult writeFile(Operation *anchor, StringRef path,
                        ArrayRef<char> data) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return anchor->emitError("cannot write ") << path << ": " << ec.message();
  os.write(data.data(), data.size());
  os.close();
  if (os.has_error())
    return anchor->emitError("write failed: ") << path;
  return success();
}

/// The model-level entries of an ArrayAttr of tensor dictionaries: those
/// whose role is one of `roles`, each name once.
json::Array modelSlots(Attribute list, ArrayRef<Role> roles,
                       llvm::StringSet<> &seen) {
  json::Array out;
  for (Attribute a : cast<ArrayAttr>(list)) {
    auto dict = cast<DictionaryAttr>(a);
    if (!llvm::is_contained(roles, dict.getAs<RoleAttr>("role").getValue()))
      continue;
    if (!seen.insert(dict.getAs<StringAttr>("name").getValue()).second)
      continue;
    out.push_back(toJSON(dict));
  }
  return out;
}

/// One stage's parameters: their bytes in the stage's own blob and the
/// manifest's list.
struct StageParameters {
  std::vector<char> blob;
  json::Array tensors;
  SmallVector<StringRef> names;
};

/// A parameter may be in several stages (a tied weight and its optimizer
/// state have a copy in each stage that reads it); the copies start equal:
/// clones of one gpipe.parameter, whose value attributes are uniqued.
FailureOr<StageParameters>
collectParameters(ModuleOp m, int64_t size,
                  llvm::StringMap<Attribute> &initial) {
  StageParameters out;
  out.blob.assign(size, 0);
  for (auto param : m.getOps<ParameterOp>()) {
    auto bytes = valueBytes(param);
    if (failed(bytes))
      return failure();
    auto [copy, first] =
        initial.try_emplace(param.getSymName(), param.getValue());
    if (!first && copy->second != param.getValue())
      return param.emitError("parameter '")
             << param.getSymName()
             << "' is in two stages with different initial values";
    int64_t offset = cast<IntegerAttr>(param->getAttr("gpipe.offset")).getInt();
    if (offset + static_cast<int64_t>(bytes->size()) > size)
      return param.emitError("parameter does not fit the planned blob");
    std::copy(bytes->begin(), bytes->end(), out.blob.begin() + offset);
    out.names.push_back(param.getSymName());
    out.tensors.push_back(
        json::Object{{"name", param.getSymName()},
                     {"dtype", typeName(param.getType().getElementType())},
                     {"shape", json::Array(param.getType().getShape())},
                     {"offset", offset},
                     {"kind", std::string(paramKindName(param.getKind()))}});
  }
  return out;
}

int64_t crcOf(ArrayRef<char> bytes) {
  return static_cast<int64_t>(llvm::crc32(ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size())));
}

} // namespace

LogicalResult gpipe::writeBundle(ArrayRef<ModuleOp> stageModules,
                                 StringRef path, const BundleOptions &options) {
  ModuleOp module = stageModules.front();
  if (options.devices.size() != stageModules.size())
    return module.emitError("the bundle has ")
           << stageModules.size() << " stages but " << options.devices.size()
           << " devices";
  if (!options.ranks.empty() && options.ranks.size() != stageModules.size())
    return module.emitError("the bundle has ")
           << stageModules.size() << " stages but " << options.ranks.size()
           << " ranks";
  // The lowered phases of each stage (forward only, or forward, backward
  // and optimizer), in the order they were lowered, and each stage's
  // parameters in its own blob.
  std::vector<SmallVector<func::FuncOp>> phases;
  std::vector<StageParameters> params;
  llvm::StringMap<Attribute> paramNames;
  for (ModuleOp m : stageModules) {
    SmallVector<func::FuncOp> stagePhases;
    for (auto f : m.getOps<func::FuncOp>())
      if (f->hasAttr("gpipe.kernels"))
        stagePhases.push_back(f);
    if (stagePhases.empty())
      return m.emitError("no lowered stage function (run gpipe-lower-stage "
                         "first)");
    // Later phases may have added constants to the blob.
    int64_t size = 0;
    for (func::FuncOp f : stagePhases)
      size = std::max(
          size, cast<IntegerAttr>(f->getAttr("gpipe.params_size")).getInt());
    FailureOr<StageParameters> p = collectParameters(m, size, paramNames);
    if (failed(p))
      return failure();
    params.push_back(std::move(*p));
    phases.push_back(std::move(stagePhases));
  }
  func::FuncOp first = phases.front().front(), last = phases.back().front();

  // The model's inputs (each stage reads the data inputs it uses; the
  // tensors that cross the cuts are the stages' own) and outputs.
  json::Array inputs;
  llvm::StringSet<> seenInputs, seenOutputs;
  for (auto &stagePhases : phases)
    for (json::Value &v :
         modelSlots(stagePhases.front()->getAttr("gpipe.inputs"), {Role::Data},
                    seenInputs))
      inputs.push_back(std::move(v));
  // The axis of the samples in the arrays a user gives for an input whose
  // model layout does not have them first (the phases take it
  // batch-first).
  if (auto axes = module->getAttrOfType<DictionaryAttr>(kDataBatchAxesAttrName))
    for (json::Value &v : inputs) {
      json::Object &input = *v.getAsObject();
      if (auto axis = axes.getAs<IntegerAttr>(*input.getString("name")))
        input["data_batch_axis"] = axis.getInt();
    }
  auto modelName = module->getAttrOfType<StringAttr>("gpipe.model_name");
  // The CPU the host code is for, and the extensions it may use: the
  // runtime refuses the bundle where they are missing.
  StageTargetOptions codeTarget = options.target;
  if (codeTarget.native.cpu.empty()) {
    llvm::Expected<NativeTargetSpec> host = resolveNativeTarget("host", "");
    if (!host)
      return module.emitError(llvm::toString(host.takeError()));
    codeTarget.native = *host;
  }
  json::Object manifest{
      {"format", "gpipe-bundle"},
      {"version", kBundleFormatVersion},
      {"model", modelName ? modelName.getValue() : "model"},
      {"source", options.sourceName},
      {"mode", options.mode},
      {"precision", options.precision},
      {"target_cpu", codeTarget.native.cpu},
      {"target_features", json::Array(codeTarget.native.required)},
      {"devices", json::Array(options.devices)},
      {"inputs", std::move(inputs)},
      {"outputs", modelSlots(last->getAttr("gpipe.outputs"),
                             {Role::Loss, Role::Output}, seenOutputs)},
  };
  if (options.mode == "train") {
    TrainingOptions t = options.training;
    if (t.batchSize == 0) {
      // The model's own batch: micro-batch rows times their number.
      auto inputs = cast<ArrayAttr>(first->getAttr("gpipe.inputs"));
      auto shape =
          cast<ArrayAttr>(cast<DictionaryAttr>(inputs[0]).get("shape"));
      t.batchSize = (shape.empty() ? 1 : cast<IntegerAttr>(shape[0]).getInt()) *
                    t.microBatches;
    }
    manifest["training"] =
        json::Object{{"batch_size", t.batchSize},
                     {"micro_batches", t.microBatches},
                     {"loss", t.loss},
                     {"ignore_index", t.ignoreIndex},
                     {"data_parallel", t.dataParallel},
                     {"optimizer", json::Object{{"kind", t.optimizer},
                                                {"lr", t.lr},
                                                {"momentum", t.momentum},
                                                {"nesterov", t.nesterov},
                                                {"weight_decay", t.weightDecay},
                                                {"beta1", t.beta1},
                                                {"beta2", t.beta2},
                                                {"eps", t.eps}}}};
  }
  if (options.schedule)
    manifest["schedule"] = *options.schedule;
  SmallVector<json::Object> wiring;
  if (options.mode == "train") {
    SmallVector<StagePhases> trainPhases;
    for (auto [k, stagePhases] : llvm::enumerate(phases)) {
      StagePhases sp;
      for (func::FuncOp f : stagePhases) {
        StringRef role = f->getAttrOfType<StringAttr>("gpipe.phase").getValue();
        (role == "forward"                                ? sp.forward
         : role == "backward" || role == "backward_input" ? sp.backward
         : role == "backward_weight"                      ? sp.backwardWeight
                                                          : sp.optimizer) = f;
      }
      if (!sp.forward || !sp.backward || !sp.optimizer)
        return stagePhases.front().emitError(
            "a training stage needs forward, backward and optimizer phases");
      if (sp.backwardWeight &&
          sp.backward->getAttrOfType<StringAttr>("gpipe.phase").getValue() !=
              "backward_input")
        return sp.backwardWeight.emitError(
            "a weight part of the backward without its input part");
      sp.parameters = params[k].names;
      trainPhases.push_back(sp);
    }
    FailureOr<SmallVector<json::Object>> wired = wireStages(trainPhases);
    if (failed(wired))
      return failure();
    wiring = std::move(*wired);
  } else if (phases.size() > 1) {
    // Pipelined inference: each stage's forward, and the activations it
    // passes on.
    SmallVector<func::FuncOp> forwards;
    for (auto &stagePhases : phases)
      forwards.push_back(stagePhases.front());
    FailureOr<SmallVector<json::Object>> wired = wireInferenceStages(forwards);
    if (failed(wired))
      return failure();
    wiring = std::move(*wired);
  }
  SmallVector<json::Object> stageJSONs;
  for (auto [k, stagePhases] : llvm::enumerate(phases)) {
    json::Array phaseJSON;
    for (func::FuncOp f : stagePhases) {
      auto role = f->getAttrOfType<StringAttr>("gpipe.phase");
      json::Object phase{
          {"role", role ? role.getValue().str() : std::string("forward")},
          {"entry", f.getSymName()},
          {"arena_size", toJSON(f->getAttr("gpipe.arena_size"))},
          {"inputs", toJSON(f->getAttr("gpipe.inputs"))},
          {"outputs", toJSON(f->getAttr("gpipe.outputs"))},
          {"kernels", toJSON(f->getAttr("gpipe.kernels"))},
          {"loops", f->hasAttr("gpipe.loops")
                        ? toJSON(f->getAttr("gpipe.loops"))
                        : json::Value(json::Array{})}};
      // The phase whose arena this one shares (docs/bundle.md).
      if (auto of = f->getAttrOfType<StringAttr>("gpipe.arena_of"))
        phase["arena_of"] = of.getValue().str();
      phaseJSON.push_back(std::move(phase));
    }
    std::string paramsFile = "stage" + std::to_string(k) + ".params";
    json::Object stageJSON{
        {"index", static_cast<int64_t>(k)},
        {"device", options.devices[k]},
        {"parameters",
         json::Object{{"file", paramsFile},
                      {"size", static_cast<int64_t>(params[k].blob.size())},
                      {"crc32", crcOf(params[k].blob)},
                      {"tensors", std::move(params[k].tensors)}}},
        {"phases", std::move(phaseJSON)},
    };
    if (!wiring.empty())
      stageJSON["wiring"] = std::move(wiring[k]);
    if (!options.ranks.empty())
      stageJSON["rank"] = options.ranks[k];
    if (options.training.dataParallel > 1) {
      // Replica r of the stage on rank r * (ranks of one replica) + rank.
      int64_t rank = options.ranks.empty() ? 0 : options.ranks[k];
      int64_t perReplica =
          options.ranks.empty()
              ? 1
              : *std::max_element(options.ranks.begin(), options.ranks.end()) +
                    1;
      json::Array replicas;
      for (int64_t r = 0; r < options.training.dataParallel; ++r)
        replicas.push_back(r * perReplica + rank);
      stageJSON["replica_ranks"] = std::move(replicas);
    }
    stageJSONs.push_back(std::move(stageJSON));
  }

  // Build in a sibling directory, then move into place.
  llvm::SmallString<256> tmp(path);
  tmp += ".tmp";
  llvm::sys::fs::remove_directories(tmp);
  if (auto ec = llvm::sys::fs::create_directories(tmp))
    return module.emitError("cannot create ") << tmp << ": " << ec.message();
  auto cleanup =
      llvm::make_scope_exit([&] { llvm::sys::fs::remove_directories(tmp); });

  for (auto [k, p] : llvm::enumerate(params)) {
    llvm::SmallString<256> file(tmp);
    llvm::sys::path::append(file, "stage" + std::to_string(k) + ".params");
    if (failed(writeFile(module, file, p.blob)))
      return failure();
  }
  if (options.mode == "train" && !options.sourcePath.empty()) {
    auto source = llvm::MemoryBuffer::getFile(options.sourcePath,
                                              /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!source)
      return module.emitError("cannot read ") << options.sourcePath;
    llvm::SmallString<256> copy(tmp);
    llvm::sys::path::append(copy, "model.onnx");
    StringRef bytes = (*source)->getBuffer();
    if (failed(writeFile(module, copy,
                         ArrayRef<char>(bytes.data(), bytes.size()))))
      return failure();
    manifest["source_model"] = json::Object{
        {"file", "model.onnx"},
        {"size", static_cast<int64_t>(bytes.size())},
        {"crc32", crcOf(ArrayRef<char>(bytes.data(), bytes.size()))}};
  }

  // Parameter values now live in the stages' parameter files; the stage
  // code only needs their offsets, already in it.
  json::Array stagesJSON;
  for (auto [k, stageModule] : llvm::enumerate(stageModules)) {
    ModuleOp m = stageModule;
    for (auto param : llvm::make_early_inc_range(m.getOps<ParameterOp>()))
      param.erase();
    FailureOr<std::unique_ptr<StageTarget>> target =
        createStageTarget(options.devices[k], m, codeTarget);
    if (failed(target))
      return failure();
    llvm::SmallString<256> library(tmp);
    llvm::sys::path::append(library, (*target)->codeFileName(k));
    if (failed((*target)->serialize(m, library)))
      return failure();
    stageJSONs[k]["library"] = (*target)->codeFileName(k);
    auto libBytes = llvm::MemoryBuffer::getFile(
        library, /*IsText=*/false, /*RequiresNullTerminator=*/false);
    if (!libBytes)
      return m.emitError("cannot read back ") << library;
    stageJSONs[k]["crc32"] = crcOf(ArrayRef<char>(
        (*libBytes)->getBufferStart(), (*libBytes)->getBufferSize()));
    // GPU kernels beside the library: the runtime loads the cubin of its
    // GPU's architecture, else JIT-compiles the PTX.
    if (std::optional<StageDeviceCode> code = (*target)->deviceCode()) {
      json::Object device{{"arch", code->arch}};
      json::Array kernels;
      for (const std::string &kernel : code->kernels)
        kernels.push_back(kernel);
      device["kernels"] = std::move(kernels);
      for (auto [key, file] :
           {std::pair<const char *, std::string>{"ptx", code->ptxFile},
            {"cubin", code->cubinFile}}) {
        if (file.empty())
          continue;
        llvm::SmallString<256> part(tmp);
        llvm::sys::path::append(part, file);
        auto bytes = llvm::MemoryBuffer::getFile(
            part, /*IsText=*/false, /*RequiresNullTerminator=*/false);
        if (!bytes)
          return m.emitError("cannot read back ") << part;
        ArrayRef<char> data((*bytes)->getBufferStart(),
                            (*bytes)->getBufferSize());
        device[key] = json::Object{{"file", file},
                                   {"size", static_cast<int64_t>(data.size())},
                                   {"crc32", crcOf(data)}};
      }
      stageJSONs[k]["device_code"] = std::move(device);
    }
    stagesJSON.push_back(std::move(stageJSONs[k]));
  }
  manifest["stages"] = std::move(stagesJSON);

  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", json::Value(std::move(manifest))) << "\n";
  llvm::SmallString<256> manifestPath(tmp);
  llvm::sys::path::append(manifestPath, "manifest.json");
  if (failed(writeFile(module, manifestPath,
                       ArrayRef<char>(text.data(), text.size()))))
    return failure();
  // The manifest's own checksum, in a file beside it.
  std::string crc =
      std::to_string(llvm::crc32(ArrayRef<uint8_t>(
          reinterpret_cast<const uint8_t *>(text.data()), text.size()))) +
      "\n";
  llvm::SmallString<256> crcPath(tmp);
  llvm::sys::path::append(crcPath, "manifest.crc32");
  if (failed(
          writeFile(module, crcPath, ArrayRef<char>(crc.data(), crc.size()))))
    return failure();

  // Replace an existing bundle only once the new one is complete.
  llvm::SmallString<256> old(path);
  old += ".old";
  llvm::sys::fs::remove_directories(old);
  bool existed = llvm::sys::fs::exists(path);
  if (existed) {
    if (!llvm::sys::fs::is_directory(path))
      return module.emitError("'") << path
                                   << "' exists and is not a bundle "
                                      "directory; not overwriting it";
    if (auto ec = llvm::sys::fs::rename(path, old))
      return module.emitError("cannot move the old bundle aside: ")
             << ec.message();
  }
  if (auto ec = llvm::sys::fs::rename(tmp, path)) {
    if (existed)
      llvm::sys::fs::rename(old, path);
    return module.emitError("cannot move the bundle into place: ")
           << ec.message();
  }
  if (existed)
    llvm::sys::fs::remove_directories(old);
  return success();
}
