#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <thread>

namespace gpipe::runtime {

using nlohmann::json;

int64_t TensorSlot::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t TensorSlot::byteSize() const {
  return numElements() * static_cast<int64_t>(dtypeSize(dtype));
}

double KernelSpec::number(const std::string &key, double dflt) const {
  auto it = numbers.find(key);
  return it == numbers.end() || it->second.empty() ? dflt : it->second.front();
}

std::vector<int64_t> KernelSpec::ints(const std::string &key) const {
  std::vector<int64_t> out;
  auto it = numbers.find(key);
  if (it != numbers.end())
    for (double v : it->second)
      out.push_back(static_cast<int64_t>(v));
  return out;
}

std::string Bundle::partPath(const std::string &file) const {
  return path + "/" + file;
}

uint32_t crc32Of(const void *data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef *bytes = static_cast<const Bytef *>(data);
  while (size > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

namespace {

[[noreturn]] void fail(const std::string &bundle, const std::string &part,
                       const std::string &reason) {
  throw BundleError(bundle + ": " + part + ": " + reason);
}

TensorSlot parseSlot(const json &j) {
  TensorSlot slot;
  slot.name = j.value("name", "");
  std::string dtype = j.at("dtype").get<std::string>();
  std::optional<DType> parsed = dtypeFromName(dtype);
  if (!parsed)
    throw BundleError("unsupported element type '" + dtype + "'");
  slot.dtype = *parsed;
  if (j.contains("role")) {
    std::string role = j.at("role").get<std::string>();
    std::optional<Role> r = roleFromName(role);
    if (!r)
      throw BundleError("tensor '" + slot.name + "' has an unknown role '" +
                        role + "'");
    slot.role = *r;
  }
  slot.trainable = j.value("trainable", false);
  slot.shape = j.at("shape").get<std::vector<int64_t>>();
  slot.space = j.value("space", "arena");
  slot.offset = j.at("offset").get<int64_t>();
  for (int64_t d : slot.shape)
    if (d < 0 || d > (int64_t(1) << 40))
      throw BundleError("tensor '" + slot.name + "' has an invalid shape");
  if (slot.offset < 0 || (slot.space != "arena" && slot.space != "params"))
    throw BundleError("tensor '" + slot.name + "' has an invalid placement");
  return slot;
}

KernelSpec parseKernel(const json &j) {
  KernelSpec k;
  k.id = j.at("id").get<int64_t>();
  k.kind = j.at("kind").get<std::string>();
  k.op = j.value("op", "");
  for (auto &[key, value] : j.at("attributes").items()) {
    if (value.is_boolean())
      k.numbers[key] = {value.get<bool>() ? 1.0 : 0.0};
    else if (value.is_number())
      k.numbers[key] = {value.get<double>()};
    else if (value.is_string())
      k.strings[key] = value.get<std::string>();
    else if (value.is_array())
      k.numbers[key] = value.get<std::vector<double>>();
  }
  for (const json &o : j.at("operands"))
    k.operands.push_back(parseSlot(o));
  for (const json &r : j.at("results"))
    k.results.push_back(parseSlot(r));
  return k;
}

std::string readFile(const std::string &bundle, const std::string &part,
                     const std::string &path) {
  std::optional<std::string> bytes = readFileBytes(path);
  if (!bytes)
    fail(bundle, part, "missing or unreadable (" + path + ")");
  return std::move(*bytes);
}

void checkFits(const std::string &bundle, const TensorSlot &slot,
               int64_t arenaSize, int64_t paramsSize) {
  int64_t limit = slot.space == "params" ? paramsSize : arenaSize;
  if (slot.offset + slot.byteSize() > limit)
    fail(bundle, "manifest.json",
         "tensor '" + slot.name + "' lies outside its " + slot.space);
}

void checkDevices(const Bundle &b) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (const std::string &text : b.devices) {
    if (text == "cpu")
      continue; // the whole host, unpinned
    std::vector<Device> devices;
    try {
      devices = parseDevices(text);
    } catch (const DeviceListError &e) {
      fail(b.path, "manifest.json", e.what());
    }
    for (const Device &d : devices) {
      if (d.kind == DeviceKind::Cpu) {
        for (int core : d.ids)
          if (static_cast<unsigned>(core) >= cores)
            fail(b.path, "devices",
                 "the bundle needs " + d.str() + " but this machine has " +
                     std::to_string(cores) + " cores");
      } else {
        std::string reason;
        int gpus = cudaDeviceCount(&reason);
        if (d.ids.front() >= gpus)
          fail(b.path, "devices",
               "the bundle needs " + d.str() + " but " +
                   (gpus
                        ? "this machine has " + std::to_string(gpus) + " GPU(s)"
                        : reason));
      }
    }
  }
}

} // namespace

namespace {
const TensorSlot *findSlot(const std::vector<TensorSlot> &slots,
                           const std::string &name) {
  for (const TensorSlot &s : slots)
    if (s.name == name)
      return &s;
  return nullptr;
}
} // namespace

const TensorSlot *PhaseSpec::input(const std::string &name) const {
  return findSlot(inputs, name);
}
const TensorSlot *PhaseSpec::output(const std::string &name) const {
  return findSlot(outputs, name);
}
const PhaseSpec *StageSpec::phase(const std::string &role) const {
  for (const PhaseSpec &p : phases)
    if (p.role == role)
      return &p;
  return nullptr;
}

namespace {
ScheduleSpec parseSchedule(const json &j, int64_t stages,
                           int64_t microBatches) {
  ScheduleSpec s;
  s.kind = j.at("kind").get<std::string>();
  s.microBatches = j.at("micro_batches").get<int64_t>();
  s.predictedStepSeconds = j.value("predicted_step_seconds", 0.0);
  s.predictedBubble = j.value("predicted_bubble", 0.0);
  if (s.microBatches != microBatches)
    throw BundleError("the schedule is for " + std::to_string(s.microBatches) +
                      " micro-batches, the training for " +
                      std::to_string(microBatches));
  for (const json &sj : j.at("streams")) {
    StreamSpec stream;
    stream.stage = sj.at("stage").get<int64_t>();
    stream.device = sj.at("device").get<std::string>();
    stream.maxAlive = sj.at("max_alive_micro_batches").get<int64_t>();
    stream.predictedPeakBytes = sj.value("predicted_peak_bytes", int64_t(0));
    if (stream.stage != static_cast<int64_t>(s.streams.size()) ||
        stream.maxAlive < 0 || stream.maxAlive > microBatches)
      throw BundleError("malformed schedule stream " +
                        std::to_string(stream.stage));
    for (const json &ij : sj.at("instructions")) {
      Instruction instr;
      std::string name = ij.at(0).get<std::string>();
      std::optional<InstructionOp> op = instructionFromName(name);
      if (!op)
        throw BundleError("unknown schedule instruction '" + name + "'");
      instr.op = *op;
      if (ij.size() > 1)
        instr.microBatch = ij.at(1).get<int64_t>();
      if (ij.size() > 2)
        instr.peer = ij.at(2).get<int64_t>();
      bool needsMicroBatch = instr.op != Instruction::Op::OptimizerStep;
      bool transfer = isTransfer(instr.op);
      if ((needsMicroBatch &&
           (instr.microBatch < 0 || instr.microBatch >= microBatches)) ||
          (transfer && (instr.peer < 0 || instr.peer >= stages ||
                        std::abs(instr.peer - stream.stage) != 1)))
        throw BundleError("malformed instruction in the schedule of stage " +
                          std::to_string(stream.stage));
      stream.instructions.push_back(instr);
    }
    s.streams.push_back(std::move(stream));
  }
  if (static_cast<int64_t>(s.streams.size()) != stages)
    throw BundleError("the schedule has " + std::to_string(s.streams.size()) +
                      " streams for " + std::to_string(stages) + " stages");
  return s;
}
} // namespace

namespace {
/// The wiring of a training stage (docs/bundle.md), its indices checked
/// against the stage's phases.
WiringSpec parseWiring(const json &j, const StageSpec &stage) {
  const PhaseSpec *fwd = stage.phase("forward"), *bwd = stage.phase("backward"),
                  *opt = stage.phase("optimizer");
  if (!fwd || !bwd || !opt)
    throw BundleError("a training stage needs forward, backward and "
                      "optimizer phases");
  std::string where = "stage " + std::to_string(stage.index) + " wiring: ";
  auto index = [&](const json &v, size_t count, const char *what) {
    int64_t i = v.get<int64_t>();
    if (i < 0 || static_cast<size_t>(i) >= count)
      throw BundleError(where + "no " + what + " " + std::to_string(i));
    return static_cast<size_t>(i);
  };
  auto layout = [&](const json &l, const std::vector<TensorSlot> &slots,
                    const char *key, const char *what) {
    MessageLayout out;
    out.bytes = l.at("bytes").get<int64_t>();
    for (const json &t : l.at("tensors")) {
      MessageLayout::Entry e;
      e.slot = index(t.at(key), slots.size(), what);
      e.offset = t.at("offset").get<int64_t>();
      e.senderSlot = t.value("sender_output", size_t(0));
      if (e.offset < 0 || e.offset + slots[e.slot].byteSize() > out.bytes)
        throw BundleError(where + "a message tensor lies outside its message");
      out.tensors.push_back(e);
    }
    return out;
  };
  WiringSpec w;
  w.sendActivations = layout(j.at("send_activations"), fwd->outputs, "output",
                             "forward output");
  w.recvActivations =
      layout(j.at("recv_activations"), fwd->inputs, "input", "forward input");
  w.sendGradients =
      layout(j.at("send_gradients"), bwd->outputs, "output", "backward output");
  w.recvGradients =
      layout(j.at("recv_gradients"), bwd->inputs, "input", "backward input");
  w.stashBytes = j.at("stash_bytes").get<int64_t>();
  for (const json &c : j.at("carried")) {
    WiringSpec::Carried carried;
    std::string from = c.at("from").get<std::string>();
    carried.input = index(c.at("input"), bwd->inputs.size(), "backward input");
    const std::vector<TensorSlot> *sources = &fwd->inputs;
    if (from == "forward_output") {
      carried.from = WiringSpec::Carried::From::ForwardOutput;
      sources = &fwd->outputs;
    } else if (from == "forward_input") {
      carried.from = WiringSpec::Carried::From::ForwardInput;
    } else if (from == "batch") {
      carried.from = WiringSpec::Carried::From::Batch;
    } else {
      throw BundleError(where + "unknown source '" + from + "'");
    }
    carried.index = index(c.at("index"), sources->size(), "source");
    int64_t bytes = bwd->inputs[carried.input].byteSize();
    if ((*sources)[carried.index].byteSize() != bytes)
      throw BundleError(where + "'" + bwd->inputs[carried.input].name +
                        "' differs between the phases");
    if (carried.from != WiringSpec::Carried::From::Batch) {
      carried.stashOffset = c.at("stash_offset").get<int64_t>();
      if (carried.stashOffset < 0 || carried.stashOffset + bytes > w.stashBytes)
        throw BundleError(where + "a stashed tensor lies outside the stash");
    }
    w.carried.push_back(carried);
  }
  for (const json &t : j.at("trained")) {
    WiringSpec::Trained trained;
    trained.parameter =
        index(t.at("parameter"), stage.parameters.tensors.size(), "parameter");
    trained.gradient =
        index(t.at("gradient"), bwd->outputs.size(), "backward output");
    trained.sum = index(t.at("sum"), opt->inputs.size(), "optimizer input");
    const TensorSlot &p = stage.parameters.tensors[trained.parameter];
    if (p.dtype != DType::F32 ||
        bwd->outputs[trained.gradient].byteSize() != p.byteSize() ||
        opt->inputs[trained.sum].byteSize() != p.byteSize())
      throw BundleError(where + "gradient of '" + p.name +
                        "' does not match the parameter");
    w.trained.push_back(trained);
  }
  for (const json &h : j.at("hyper")) {
    std::string name = h.at("hyper").get<std::string>();
    std::optional<Hyper> hyper = hyperFromName(name);
    if (!hyper)
      throw BundleError(where +
                        "the optimizer asks for an unknown "
                        "hyper-parameter '" +
                        name + "'");
    size_t input = index(h.at("input"), opt->inputs.size(), "optimizer input");
    if (opt->inputs[input].dtype != DType::F32 ||
        opt->inputs[input].numElements() != 1)
      throw BundleError(where + "hyper-parameter '" + name +
                        "' must be a float32 scalar");
    w.hyper.push_back({*hyper, input});
  }
  if (j.contains("loss"))
    w.loss = static_cast<int64_t>(
        index(j.at("loss"), fwd->outputs.size(), "forward output"));
  if (j.contains("loss_grad"))
    w.lossGrad = static_cast<int64_t>(
        index(j.at("loss_grad"), bwd->inputs.size(), "backward input"));
  if (j.contains("output"))
    w.output = static_cast<int64_t>(
        index(j.at("output"), fwd->outputs.size(), "forward output"));
  return w;
}
/// Neighbouring stages agree on their messages: what stage k receives is
/// what stage k-1 (activations) or k+1 (gradients) sends, tensor by tensor.
void checkMessages(const std::vector<StageSpec> &stages) {
  for (size_t k = 0; k < stages.size(); ++k) {
    const WiringSpec &w = stages[k].wiring;
    std::string where = "stage " + std::to_string(k) + " wiring: ";
    const PhaseSpec &fwd = *stages[k].phase("forward");
    if (k == 0 ? !w.recvActivations.tensors.empty()
               : w.recvActivations.bytes !=
                     stages[k - 1].wiring.sendActivations.bytes)
      throw BundleError(where + "its activations are not the size that the "
                                "stage before sends");
    if (k + 1 == stages.size()
            ? !w.recvGradients.tensors.empty()
            : w.recvGradients.bytes != stages[k + 1].wiring.sendGradients.bytes)
      throw BundleError(where + "its gradients are not the size that the "
                                "stage after sends");
    for (const MessageLayout::Entry &e : w.recvActivations.tensors) {
      const std::vector<TensorSlot> &sent =
          stages[k - 1].phase("forward")->outputs;
      if (e.senderSlot >= sent.size() ||
          sent[e.senderSlot].byteSize() != fwd.inputs[e.slot].byteSize())
        throw BundleError(where + "input '" + fwd.inputs[e.slot].name +
                          "' does not match the output it comes from");
    }
  }
}

} // namespace

Bundle loadBundle(const std::string &path) {
  Bundle b;
  b.path = path;
  std::string text = readFile(path, "manifest.json", path + "/manifest.json");
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception &e) {
    fail(path, "manifest.json",
         std::string("not valid JSON (truncated or corrupt): ") + e.what());
  }
  try {
    if (m.value("format", "") != "gpipe-bundle")
      fail(path, "manifest.json", "not a gpipe bundle manifest");
    int64_t version = m.at("version").get<int64_t>();
    if (version != kBundleFormatVersion)
      fail(path, "manifest.json",
           "format version " + std::to_string(version) +
               ", but this runtime reads version " +
               std::to_string(kBundleFormatVersion) +
               " (recompile the model with a matching gpipe-opt)");
    b.model = m.at("model").get<std::string>();
    b.mode = m.at("mode").get<std::string>();
    b.targetCpu = m.value("target_cpu", "");
    b.devices = m.at("devices").get<std::vector<std::string>>();
    for (const json &j : m.at("inputs"))
      b.inputs.push_back(parseSlot(j));
    for (const json &j : m.at("outputs"))
      b.outputs.push_back(parseSlot(j));
    if (b.mode == "train") {
      const json &t = m.at("training");
      b.training.batchSize = t.at("batch_size").get<int64_t>();
      b.training.microBatches = t.at("micro_batches").get<int64_t>();
      b.training.loss = t.at("loss").get<std::string>();
      const json &o = t.at("optimizer");
      b.training.optimizer = o.at("kind").get<std::string>();
      b.training.lr = o.at("lr").get<double>();
      b.training.momentum = o.at("momentum").get<double>();
      b.training.nesterov = o.at("nesterov").get<bool>();
      b.training.weightDecay = o.at("weight_decay").get<double>();
      b.training.beta1 = o.value("beta1", 0.9);
      b.training.beta2 = o.value("beta2", 0.999);
      b.training.eps = o.value("eps", 1e-8);
      if (b.training.microBatches < 1 || b.training.batchSize < 1)
        fail(path, "manifest.json", "invalid training batch sizes");
    }
    for (const json &j : m.at("stages")) {
      StageSpec s;
      s.index = j.at("index").get<int64_t>();
      s.device = j.at("device").get<std::string>();
      s.library = j.at("library").get<std::string>();
      s.crc32 = j.at("crc32").get<uint32_t>();
      const json &p = j.at("parameters");
      s.parameters.file = p.at("file").get<std::string>();
      s.parameters.size = p.at("size").get<int64_t>();
      s.parameters.crc32 = p.at("crc32").get<uint32_t>();
      for (const json &t : p.at("tensors")) {
        TensorSlot slot = parseSlot(t);
        slot.space = "params";
        s.parameters.tensors.push_back(slot);
      }
      for (const json &pj : j.at("phases")) {
        PhaseSpec phase;
        phase.role = pj.at("role").get<std::string>();
        phase.entry = pj.at("entry").get<std::string>();
        phase.arenaSize = pj.at("arena_size").get<int64_t>();
        for (const json &k : pj.at("kernels"))
          phase.kernels.push_back(parseKernel(k));
        for (const json &io : pj.at("inputs"))
          phase.inputs.push_back(parseSlot(io));
        for (const json &io : pj.at("outputs"))
          phase.outputs.push_back(parseSlot(io));
        s.phases.push_back(std::move(phase));
      }
      if (s.phases.empty())
        fail(path, "manifest.json", "a stage without phases");
      if (b.mode == "train")
        s.wiring = parseWiring(j.at("wiring"), s);
      b.stages.push_back(std::move(s));
    }
    if (b.stages.empty())
      fail(path, "manifest.json", "a bundle without stages");
    if (b.mode == "train") {
      if (!m.contains("schedule"))
        fail(path, "manifest.json", "a training bundle without a schedule");
      b.schedule =
          parseSchedule(m.at("schedule"), static_cast<int64_t>(b.stages.size()),
                        b.training.microBatches);
      checkMessages(b.stages);
    } else if (b.stages.size() != 1) {
      fail(path, "manifest.json",
           "an inference bundle has one stage (pipelined inference is not "
           "implemented)");
    }
  } catch (const json::exception &e) {
    fail(path, "manifest.json", std::string("malformed: ") + e.what());
  } catch (const BundleError &e) {
    if (std::string(e.what()).rfind(path, 0) == 0)
      throw;
    fail(path, "manifest.json", e.what());
  }
  // Version first (a bundle of another version may checksum differently),
  // then the manifest's own checksum.
  std::string crcText =
      readFile(path, "manifest.crc32", path + "/manifest.crc32");
  uint32_t recorded = 0;
  try {
    recorded = static_cast<uint32_t>(std::stoul(crcText));
  } catch (const std::exception &) {
    fail(path, "manifest.crc32", "not a checksum");
  }
  if (crc32Of(text.data(), text.size()) != recorded)
    fail(path, "manifest.json", "checksum mismatch (the file is corrupt)");
  std::vector<std::string> parts;
  for (const StageSpec &s : b.stages) {
    parts.push_back(s.library);
    parts.push_back(s.parameters.file);
  }
  for (const std::string &file : parts)
    if (file.empty() || file.find('/') != std::string::npos ||
        file.find("..") != std::string::npos)
      fail(path, "manifest.json", "invalid part name '" + file + "'");

  for (StageSpec &s : b.stages) {
    ParameterBlob &blob = s.parameters;
    std::string params = readFile(path, blob.file, b.partPath(blob.file));
    if (static_cast<int64_t>(params.size()) != blob.size)
      fail(path, blob.file,
           "holds " + std::to_string(params.size()) +
               " bytes, the manifest says " + std::to_string(blob.size));
    if (crc32Of(params.data(), params.size()) != blob.crc32)
      fail(path, blob.file, "checksum mismatch (the file is corrupt)");
    blob.data = std::move(params);
    for (const TensorSlot &t : blob.tensors)
      checkFits(path, t, 0, blob.size);
    std::string lib = readFile(path, s.library, b.partPath(s.library));
    if (crc32Of(lib.data(), lib.size()) != s.crc32)
      fail(path, s.library, "checksum mismatch (the file is corrupt)");
    for (const PhaseSpec &phase : s.phases) {
      int64_t arena = phase.arenaSize;
      for (const TensorSlot &t : phase.inputs)
        checkFits(path, t, arena, blob.size);
      for (const TensorSlot &t : phase.outputs)
        checkFits(path, t, arena, blob.size);
      for (const KernelSpec &k : phase.kernels) {
        for (const TensorSlot &t : k.operands)
          checkFits(path, t, arena, blob.size);
        for (const TensorSlot &t : k.results)
          checkFits(path, t, arena, blob.size);
      }
    }
  }
  if (m.contains("source_model")) {
    const json &src = m["source_model"];
    std::string file = src.value("file", "");
    if (file.empty() || file.find('/') != std::string::npos)
      fail(path, "manifest.json", "invalid source model name");
    std::string bytes = readFile(path, file, b.partPath(file));
    if (crc32Of(bytes.data(), bytes.size()) != src.value("crc32", 0u))
      fail(path, file, "checksum mismatch (the file is corrupt)");
    b.sourceModel = file;
  }
  checkDevices(b);
  return b;
}

} // namespace gpipe::runtime
