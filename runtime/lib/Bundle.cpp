#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include "gpipe/common/CpuFeatures.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
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

std::vector<int64_t> TensorSlot::dataShape(int64_t samples) const {
  std::vector<int64_t> out(shape);
  if (out.empty())
    return out;
  out.erase(out.begin());
  out.insert(out.begin() + std::min<int64_t>(dataBatchAxis, out.size()),
             samples);
  return out;
}

bool TensorSlot::holdsData(const std::vector<int64_t> &given) const {
  std::vector<int64_t> want = dataShape(0);
  if (given.size() != want.size())
    return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (int64_t(i) != dataBatchAxis && given[i] != want[i])
      return false;
  return true;
}

std::string TensorSlot::describeData() const {
  std::vector<int64_t> want = dataShape(0);
  std::string s = std::string(dtypeName(dtype)) + "[";
  for (size_t i = 0; i < want.size(); ++i)
    s += (i ? ", " : "") +
         (int64_t(i) == dataBatchAxis ? "N" : std::to_string(want[i]));
  return s + "]";
}

void KernelSpec::fail(const std::string &why) const {
  throw BundleError("kernel " + std::to_string(id) + " (" + kind + "): " + why);
}

const TensorSlot *KernelSpec::optionalOperand(std::string_view name) const {
  std::optional<size_t> i = contract->operandIndex(name);
  if (!i)
    fail("the contract has no operand '" + std::string(name) + "'");
  return *i < operands.size() ? &operands[*i] : nullptr;
}

const TensorSlot &KernelSpec::operand(std::string_view name) const {
  if (const TensorSlot *slot = optionalOperand(name))
    return *slot;
  fail("has no operand '" + std::string(name) + "'");
}

const TensorSlot &KernelSpec::result(std::string_view name) const {
  std::optional<size_t> i = contract->resultIndex(name);
  if (!i || *i >= results.size())
    fail("has no result '" + std::string(name) + "'");
  return results[*i];
}

double KernelSpec::number(const std::string &key) const {
  auto it = numbers.find(key);
  if (it == numbers.end() || it->second.size() != 1)
    fail("attribute '" + key + "' is not a number");
  return it->second.front();
}

std::vector<int64_t> KernelSpec::ints(const std::string &key) const {
  auto it = numbers.find(key);
  if (it == numbers.end())
    fail("has no attribute '" + key + "'");
  std::vector<int64_t> out;
  for (double v : it->second) {
    // An integer attribute (kernel sizes, strides, axes): whole and far
    // inside int64 (a cast of anything else is undefined).
    if (!(v >= -9.0e15 && v <= 9.0e15) ||
        v != static_cast<double>(static_cast<int64_t>(v)))
      fail("attribute '" + key + "' is not a list of integers");
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

int64_t Bundle::ranksPerReplica() const {
  int64_t count = 1;
  for (const StageSpec &s : stages)
    count = std::max(count, s.rank + 1);
  return count;
}

int64_t Bundle::rankCount() const {
  return ranksPerReplica() * std::max<int64_t>(1, training.dataParallel);
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

} // namespace

namespace {

/// Part `file` of `b` opened at its start, and its size; BundleError if
/// it is missing or not of `size` bytes (when `size` >= 0).
std::pair<std::ifstream, int64_t>
openPart(const Bundle &b, const std::string &file, int64_t size) {
  std::string path = b.partPath(file);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  int64_t actual = in ? static_cast<int64_t>(in.tellg()) : -1;
  if (actual < 0)
    fail(b.path, file, "missing or unreadable (" + path + ")");
  if (size >= 0 && actual != size)
    fail(b.path, file,
         "holds " + std::to_string(actual) + " bytes, the manifest says " +
             std::to_string(size));
  in.seekg(0);
  return {std::move(in), actual};
}

/// Reads part `file` of `b` in pieces of at most 1 MiB, in order, handing
/// each to `consume`; checks its size (`size` >= 0) and its checksum after
/// the last piece. A part is never held whole: a source model or a stage's
/// parameters can be a large share of a process's memory.
void readPart(
    const Bundle &b, const std::string &file, int64_t size,
    uint32_t crc32Wanted,
    const std::function<void(int64_t, const char *, int64_t)> &consume) {
  auto [in, actual] = openPart(b, file, size);
  std::vector<char> piece(
      static_cast<size_t>(std::min<int64_t>(actual, int64_t(1) << 20)));
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int64_t offset = 0; offset < actual;) {
    int64_t n =
        std::min<int64_t>(actual - offset, static_cast<int64_t>(piece.size()));
    if (!in.read(piece.data(), n))
      fail(b.path, file, "unreadable (" + b.partPath(file) + ")");
    crc = crc32(crc, reinterpret_cast<const Bytef *>(piece.data()),
                static_cast<uInt>(n));
    consume(offset, piece.data(), n);
    offset += n;
  }
  if (static_cast<uint32_t>(crc) != crc32Wanted)
    fail(b.path, file, "checksum mismatch (the file is corrupt)");
}

/// Checks part `file`'s size (when >= 0) and checksum, keeping nothing.
void checkPart(const Bundle &b, const std::string &file, int64_t size,
               uint32_t crc32Wanted) {
  readPart(b, file, size, crc32Wanted, [](int64_t, const char *, int64_t) {});
}

} // namespace

void readParameters(
    const Bundle &b, const ParameterBlob &blob,
    const std::function<void(int64_t, const char *, int64_t)> &consume) {
  readPart(b, blob.file, blob.size, blob.crc32, consume);
}

namespace {

/// An integer of the manifest. get<T>() would also convert a number with a
/// fraction or an exponent, with undefined behaviour where it is out of T's
/// range (1e300, or -1.5 as an unsigned checksum).
template <typename T> T integer(const json &j) {
  if (!j.is_number_integer())
    throw BundleError("expected an integer, not " + j.dump());
  return j.get<T>();
}
template <typename T> T integer(const json &j, const char *key, T dflt) {
  return j.contains(key) ? integer<T>(j.at(key)) : dflt;
}

/// Offsets stay below 2^48 and the product of a shape's non-zero dimensions
/// below 2^40, so that no size, offset or sum of them overflows.
constexpr int64_t kMaxOffset = int64_t(1) << 48;
constexpr int64_t kMaxElements = int64_t(1) << 40;

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
  const json &shape = j.at("shape");
  if (!shape.is_array())
    throw BundleError("tensor '" + slot.name + "' has an invalid shape");
  for (const json &d : shape)
    slot.shape.push_back(integer<int64_t>(d));
  if (j.contains("batch")) {
    const json &batch = j.at("batch");
    if (!batch.is_array() || batch.size() != 2)
      throw BundleError("tensor '" + slot.name + "' has an invalid batch");
    slot.batchAxis = integer<int64_t>(batch[0]);
    slot.batchInner = integer<int64_t>(batch[1]);
    if (slot.batchAxis < 0 || slot.batchAxis >= int64_t(slot.shape.size()) ||
        slot.batchInner < 1 ||
        slot.shape[slot.batchAxis] % slot.batchInner != 0)
      throw BundleError("tensor '" + slot.name + "' has an invalid batch");
  }
  if (j.contains("data_batch_axis")) {
    slot.dataBatchAxis = integer<int64_t>(j.at("data_batch_axis"));
    if (slot.dataBatchAxis < 0 ||
        slot.dataBatchAxis >= int64_t(slot.shape.size()))
      throw BundleError("tensor '" + slot.name +
                        "' has an invalid data_batch_axis");
  }
  slot.space = j.value("space", "arena");
  slot.offset = integer<int64_t>(j.at("offset"));
  if (j.contains("written_by"))
    slot.writtenBy = integer<int64_t>(j.at("written_by"));
  int64_t count = 1; // of the non-zero dimensions
  for (int64_t d : slot.shape) {
    if (d < 0 || (d > 0 && count > kMaxElements / d))
      throw BundleError("tensor '" + slot.name + "' has an invalid shape");
    count *= std::max<int64_t>(d, 1);
  }
  if (slot.offset < 0 || slot.offset > kMaxOffset ||
      (slot.space != "arena" && slot.space != "params"))
    throw BundleError("tensor '" + slot.name + "' has an invalid placement");
  return slot;
}

KernelSpec parseKernel(const json &j) {
  KernelSpec k;
  k.id = integer<int64_t>(j.at("id"));
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
  k.contract = findKernelKind(k.kind);
  if (!k.contract)
    k.fail("unknown kernel kind (this runtime runs " +
           std::string("the kinds of common/KernelKind.h)"));
  std::string wrong =
      checkKernelEntry(*k.contract, k.operands.size(), k.results.size(),
                       [&](std::string_view name) {
                         std::string key(name);
                         return k.numbers.count(key) || k.strings.count(key);
                       });
  if (!wrong.empty())
    k.fail(wrong);
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

/// Every device string of the bundle parses.
void checkDeviceSyntax(const Bundle &b) {
  for (const std::string &text : b.devices) {
    if (text == "cpu")
      continue; // the whole host, unpinned
    try {
      parseDevices(text);
    } catch (const DeviceListError &e) {
      fail(b.path, "manifest.json", e.what());
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

const TensorSlot *Bundle::input(const std::string &name) const {
  return findSlot(inputs, name);
}
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

int64_t StageSpec::arenaBytes(size_t phase) const {
  const PhaseSpec &own = phases.at(phase);
  if (!own.arenaOf.empty())
    return 0;
  int64_t bytes = own.arenaSize;
  for (const PhaseSpec &other : phases)
    if (other.arenaOf == own.role)
      bytes = std::max(bytes, other.arenaSize);
  return bytes;
}

namespace {
/// Streams sharing a device take turns: each compute instruction of a
/// grouped stream has a turn, rising within the stream, the group's turns
/// 0, 1, ... once each (the order the compiler proved free of deadlock);
/// a stream alone on its device has none.
void checkTurns(const ScheduleSpec &s) {
  std::map<int64_t, std::set<int64_t>> turns;
  std::map<int64_t, std::string> devices;
  for (const StreamSpec &stream : s.streams) {
    std::string where = "the schedule of stage " + std::to_string(stream.stage);
    if (stream.deviceGroup >= 0) {
      auto [it, first] = devices.emplace(stream.deviceGroup, stream.device);
      if (!first && it->second != stream.device)
        throw BundleError(where + " shares device group " +
                          std::to_string(stream.deviceGroup) +
                          " with another device");
    }
    int64_t last = -1;
    for (const Instruction &instr : stream.instructions) {
      bool compute =
          !isTransfer(instr.op) && instr.op != Instruction::Op::OptimizerStep;
      if (stream.deviceGroup < 0
              ? instr.turn >= 0
              : compute &&
                    (instr.turn <= last ||
                     !turns[stream.deviceGroup].insert(instr.turn).second))
        throw BundleError(where + " has a turn out of order");
      if (compute && stream.deviceGroup >= 0)
        last = instr.turn;
    }
  }
  for (const auto &[group, taken] : turns)
    if (!taken.empty() &&
        (*taken.begin() != 0 ||
         *taken.rbegin() + 1 != static_cast<int64_t>(taken.size())))
      throw BundleError("device group " + std::to_string(group) +
                        " of the schedule skips turns");
}

ScheduleSpec parseSchedule(const json &j, int64_t stages,
                           int64_t microBatches) {
  ScheduleSpec s;
  s.kind = j.at("kind").get<std::string>();
  s.microBatches = integer<int64_t>(j.at("micro_batches"));
  s.predictedStepSeconds = j.value("predicted_step_seconds", 0.0);
  s.profileGflopsPerCore = j.value("profile_gflops_per_core", 0.0);
  s.predictedBubble = j.value("predicted_bubble", 0.0);
  if (s.microBatches != microBatches)
    throw BundleError("the schedule is for " + std::to_string(s.microBatches) +
                      " micro-batches, the training for " +
                      std::to_string(microBatches));
  for (const json &sj : j.at("streams")) {
    StreamSpec stream;
    stream.stage = integer<int64_t>(sj.at("stage"));
    stream.device = sj.at("device").get<std::string>();
    stream.maxAlive = integer<int64_t>(sj.at("max_alive_micro_batches"));
    stream.predictedPeakBytes = integer(sj, "predicted_peak_bytes", int64_t(0));
    stream.recompute = sj.value("recompute", false);
    stream.deviceGroup = integer(sj, "device_group", int64_t(-1));
    if (stream.deviceGroup < -1 || stream.deviceGroup >= stages)
      throw BundleError("malformed device group of schedule stream " +
                        std::to_string(stream.stage));
    if (sj.contains("predicted_timeline"))
      for (const json &box : sj.at("predicted_timeline")) {
        TimelineBox b;
        b.kind = timelineKind(box.at(0).get<std::string>());
        b.microBatch = integer<int64_t>(box.at(1));
        b.begin = box.at(2).get<double>();
        b.end = box.at(3).get<double>();
        if (!std::isfinite(b.begin) || !std::isfinite(b.end) || b.end < b.begin)
          throw BundleError("malformed predicted timeline of stage " +
                            std::to_string(stream.stage));
        if (!b.kind.empty())
          stream.predictedTimeline.push_back(std::move(b));
      }
    if (sj.contains("predicted_ops"))
      for (const json &op : sj.at("predicted_ops")) {
        StreamSpec::PredictedOp p{op.at(0).get<std::string>(),
                                  op.at(1).get<double>(),
                                  op.at(2).get<double>()};
        if (!std::isfinite(p.forward) || !std::isfinite(p.backward) ||
            p.forward < 0 || p.backward < 0)
          throw BundleError("malformed predicted time of op '" + p.op +
                            "' in stage " + std::to_string(stream.stage));
        stream.predictedOps.push_back(std::move(p));
      }
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
        instr.microBatch = integer<int64_t>(ij.at(1));
      bool needsMicroBatch = instr.op != Instruction::Op::OptimizerStep;
      bool transfer = isTransfer(instr.op);
      if (ij.size() > 2)
        (transfer ? instr.peer : instr.turn) = integer<int64_t>(ij.at(2));
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
  checkTurns(s);
  return s;
}
} // namespace

namespace {
/// The wiring of a training stage, or (`training` false) of a stage of
/// pipelined inference, which has only a forward and its activations
/// (docs/bundle.md), its indices checked against the stage's phases.
WiringSpec parseWiring(const json &j, const StageSpec &stage, bool training) {
  const PhaseSpec *fwd = stage.phase("forward"),
                  *bwd = stage.phase(stage.backwardRole()),
                  *opt = stage.phase("optimizer"),
                  *weight = stage.phase("backward_weight");
  if (!training && (!fwd || stage.phases.size() != 1))
    throw BundleError("a stage of pipelined inference has one phase, its "
                      "forward");
  if (training && (!fwd || !bwd || !opt))
    throw BundleError("a training stage needs forward, backward (or "
                      "backward_input and backward_weight) and optimizer "
                      "phases");
  if (weight && stage.phase("backward"))
    throw BundleError("a training stage has a backward and a split one");
  // Where the parameters' gradients come out.
  const PhaseSpec *grads = weight ? weight : bwd;
  std::string where = "stage " + std::to_string(stage.index) + " wiring: ";
  auto index = [&](const json &v, size_t count, const char *what) {
    int64_t i = integer<int64_t>(v);
    if (i < 0 || static_cast<size_t>(i) >= count)
      throw BundleError(where + "no " + what + " " + std::to_string(i));
    return static_cast<size_t>(i);
  };
  auto layout = [&](const json &l, const std::vector<TensorSlot> &slots,
                    const char *key, const char *what) {
    MessageLayout out;
    out.bytes = integer<int64_t>(l.at("bytes"));
    for (const json &t : l.at("tensors")) {
      MessageLayout::Entry e;
      e.slot = index(t.at(key), slots.size(), what);
      e.offset = integer<int64_t>(t.at("offset"));
      e.senderSlot = integer(t, "sender_output", size_t(0));
      std::string type = t.value("dtype", std::string("f32"));
      const TensorSlot &slot = slots[e.slot];
      if (type != "f32" && type != "bf16")
        throw BundleError(where + "message dtype '" + type +
                          "' is not f32 or bf16");
      e.bf16 = type == "bf16";
      if (e.bf16 && (slot.dtype != DType::F32 || e.offset % 4 != 0))
        throw BundleError(where + "'" + slot.name +
                          "' is carried in bfloat16 but is not float32 or "
                          "lies at an unaligned offset");
      int64_t bytes = e.bf16 ? slot.numElements() * 2 : slot.byteSize();
      if (e.offset < 0 || e.offset > kMaxOffset || e.offset + bytes > out.bytes)
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
  if (!training) {
    if (j.contains("output"))
      w.output = static_cast<int64_t>(
          index(j.at("output"), fwd->outputs.size(), "forward output"));
    return w;
  }
  w.sendGradients =
      layout(j.at("send_gradients"), bwd->outputs, "output", "backward output");
  w.recvGradients =
      layout(j.at("recv_gradients"), bwd->inputs, "input", "backward input");
  w.stashBytes = integer<int64_t>(j.at("stash_bytes"));
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
      carried.stashOffset = integer<int64_t>(c.at("stash_offset"));
      std::string type = c.value("stash_dtype", std::string("f32"));
      if (type != "f32" && type != "bf16")
        throw BundleError(where + "stash_dtype '" + type +
                          "' is not f32 or bf16");
      carried.bf16 = type == "bf16";
      if (carried.bf16) {
        if (bwd->inputs[carried.input].dtype != DType::F32 ||
            (*sources)[carried.index].dtype != DType::F32)
          throw BundleError(where + "'" + bwd->inputs[carried.input].name +
                            "' is kept in bfloat16 but is not float32");
        if (carried.stashOffset % 4 != 0)
          throw BundleError(where + "'" + bwd->inputs[carried.input].name +
                            "' is kept in bfloat16 at an unaligned offset");
        bytes = bwd->inputs[carried.input].numElements() * 2;
      }
      if (carried.stashOffset < 0 || carried.stashOffset > kMaxOffset ||
          carried.stashOffset + bytes > w.stashBytes)
        throw BundleError(where + "a stashed tensor lies outside the stash");
    }
    w.carried.push_back(carried);
  }
  for (const json &t : j.at("trained")) {
    WiringSpec::Trained trained;
    trained.parameter =
        index(t.at("parameter"), stage.parameters.tensors.size(), "parameter");
    trained.gradient =
        index(t.at("gradient"), grads->outputs.size(), "backward output");
    trained.sum = index(t.at("sum"), opt->inputs.size(), "optimizer input");
    if (t.contains("tied_stages")) {
      trained.tie = integer<int64_t>(t.at("tie"));
      for (const json &s : t.at("tied_stages"))
        trained.tiedStages.push_back(integer<int64_t>(s));
      bool self = false, ascending = trained.tie >= 0;
      for (size_t i = 0; i < trained.tiedStages.size(); ++i) {
        self |= trained.tiedStages[i] == stage.index;
        ascending &=
            trained.tiedStages[i] >= 0 &&
            (i == 0 || trained.tiedStages[i] > trained.tiedStages[i - 1]);
      }
      if (!self || !ascending || trained.tiedStages.size() < 2)
        throw BundleError(
            where + "the stages sharing '" +
            stage.parameters.tensors[trained.parameter].name +
            "' must be two or more, ascending, this one included");
    }
    const TensorSlot &p = stage.parameters.tensors[trained.parameter];
    if (p.dtype != DType::F32 ||
        grads->outputs[trained.gradient].byteSize() != p.byteSize() ||
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
  if (weight != nullptr) {
    using From = WiringSpec::WeightInput::From;
    if (!j.contains("weight_inputs"))
      throw BundleError(where + "a split backward without weight_inputs");
    std::vector<bool> seen(weight->inputs.size(), false);
    for (const json &c : j.at("weight_inputs")) {
      WiringSpec::WeightInput in;
      in.input =
          index(c.at("input"), weight->inputs.size(), "backward_weight input");
      std::string from = c.at("from").get<std::string>();
      if (from != "backward_input" && from != "backward_output")
        throw BundleError(where + "unknown source '" + from + "'");
      in.fromOutput = from == "backward_output";
      const std::vector<TensorSlot> &sources =
          in.fromOutput ? bwd->outputs : bwd->inputs;
      in.index = index(c.at("index"), sources.size(),
                       in.fromOutput ? "backward_input output"
                                     : "backward_input input");
      const TensorSlot &slot = weight->inputs[in.input];
      int64_t bytes = slot.byteSize();
      if (sources[in.index].byteSize() != bytes)
        throw BundleError(where + "'" + slot.name +
                          "' differs between the backward's parts");
      if (c.value("kept", false)) {
        in.stashOffset = integer<int64_t>(c.at("stash_offset"));
        if (in.stashOffset < 0 || in.stashOffset > kMaxOffset ||
            in.stashOffset + bytes > w.stashBytes)
          throw BundleError(where + "a kept tensor lies outside the stash");
      } else if (in.fromOutput) {
        throw BundleError(where + "an output of backward_input that " +
                          "backward_weight reads must be kept");
      } else if (static_cast<int64_t>(in.index) == w.lossGrad) {
        in.from = From::LossSeed;
      } else {
        // As the input part reads it: from the stash or the batch.
        auto carried = std::find_if(
            w.carried.begin(), w.carried.end(),
            [&](const WiringSpec::Carried &c) { return c.input == in.index; });
        if (carried == w.carried.end())
          throw BundleError(where + "backward_weight input '" + slot.name +
                            "' is neither kept nor read again");
        bool batch = carried->from == WiringSpec::Carried::From::Batch;
        in.from = batch ? From::Batch : From::Stash;
        in.index = batch ? carried->index : in.index;
        in.stashOffset = carried->stashOffset;
        in.bf16 = carried->bf16;
      }
      seen[in.input] = true;
      w.weightInputs.push_back(in);
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end())
      throw BundleError(where + "an input of backward_weight comes from "
                                "nowhere");
  }
  return w;
}
/// Stages that share a weight agree on it: each one they name has the same
/// tie, the same list of stages and a parameter of the same size (else a
/// stage would wait for a gradient that never comes).
void checkTies(const std::vector<StageSpec> &stages) {
  for (const StageSpec &s : stages)
    for (const WiringSpec::Trained &t : s.wiring.trained) {
      const TensorSlot &param = s.parameters.tensors[t.parameter];
      for (int64_t peer : t.tiedStages) {
        const WiringSpec::Trained *match = nullptr;
        if (peer < static_cast<int64_t>(stages.size()))
          for (const WiringSpec::Trained &u : stages[peer].wiring.trained)
            if (u.tie == t.tie)
              match = &u;
        if (!match || match->tiedStages != t.tiedStages ||
            stages[peer].parameters.tensors[match->parameter].byteSize() !=
                param.byteSize())
          throw BundleError(
              "stage " + std::to_string(s.index) + " wiring: shared weight '" +
              param.name + "' (tie " + std::to_string(t.tie) +
              ") is not shared the same way by stage " + std::to_string(peer));
      }
    }
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
      const std::vector<MessageLayout::Entry> &from =
          stages[k - 1].wiring.sendActivations.tensors;
      auto sender = std::find_if(from.begin(), from.end(),
                                 [&](const MessageLayout::Entry &s) {
                                   return s.slot == e.senderSlot;
                                 });
      if (e.senderSlot >= sent.size() ||
          sent[e.senderSlot].byteSize() != fwd.inputs[e.slot].byteSize() ||
          sender == from.end() || sender->offset != e.offset ||
          sender->bf16 != e.bf16)
        throw BundleError(where + "input '" + fwd.inputs[e.slot].name +
                          "' does not match the output it comes from");
    }
  }
}

/// Pipelined inference: every stage but the last passes activations on,
/// each stage's data inputs are inputs of the model as the caller gives
/// them, and the model's outputs are the last stage's forward outputs,
/// where the runtime copies them from.
void checkInferenceStages(const Bundle &b) {
  for (size_t k = 0; k < b.stages.size(); ++k) {
    const StageSpec &s = b.stages[k];
    std::string where = "stage " + std::to_string(k) + " ";
    if (k + 1 < b.stages.size() && s.wiring.sendActivations.bytes <= 0)
      throw BundleError(where + "passes nothing on to stage " +
                        std::to_string(k + 1));
    for (const TensorSlot &in : s.phase("forward")->inputs) {
      if (in.role != Role::Data)
        continue;
      auto model =
          std::find_if(b.inputs.begin(), b.inputs.end(),
                       [&](const TensorSlot &m) { return m.name == in.name; });
      if (model == b.inputs.end() || model->dtype != in.dtype ||
          model->byteSize() != in.byteSize())
        throw BundleError(where + "reads '" + in.name +
                          "', which is no input of the model of that type "
                          "and size");
    }
  }
  const PhaseSpec &last = *b.stages.back().phase("forward");
  for (const TensorSlot &out : b.outputs) {
    bool found = std::any_of(
        last.outputs.begin(), last.outputs.end(), [&](const TensorSlot &o) {
          return o.name == out.name && o.dtype == out.dtype &&
                 o.shape == out.shape && o.offset == out.offset;
        });
    if (!found)
      throw BundleError("the model's output '" + out.name +
                        "' is no forward output of the last stage");
  }
}

} // namespace

void checkTargetFeatures(const Bundle &bundle,
                         const std::vector<std::string> &available) {
  std::vector<std::string> missing =
      missingCpuFeatures(bundle.targetFeatures, available);
  if (missing.empty())
    return;
  std::string names;
  for (const std::string &name : missing)
    names += (names.empty() ? "" : ", ") + name;
  fail(bundle.path, "manifest.json",
       "its native code was compiled for the CPU '" + bundle.targetCpu +
           "' and needs CPU features this machine lacks: " + names +
           "; recompile the model with gpipe-opt --target-cpu=" +
           hostMicroarchitectureLevel() +
           " (the highest portable level this machine runs) or "
           "--target-cpu=host on a machine like this one");
}

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
    int64_t version = integer<int64_t>(m.at("version"));
    if (version != kBundleFormatVersion)
      fail(path, "manifest.json",
           "format version " + std::to_string(version) +
               ", but this runtime reads version " +
               std::to_string(kBundleFormatVersion) +
               " (recompile the model with a matching gpipe-opt)");
    b.model = m.at("model").get<std::string>();
    b.mode = m.at("mode").get<std::string>();
    b.precision = m.at("precision").get<std::string>();
    if (b.precision != "fp32" && b.precision != "bf16")
      fail(path, "manifest.json",
           "precision '" + b.precision + "' is not fp32 or bf16");
    b.targetCpu = m.value("target_cpu", "");
    b.targetFeatures = m.value("target_features", std::vector<std::string>{});
    if (!b.targetFeatures.empty()) // (older bundles: nothing to check)
      checkTargetFeatures(b, hostCpuFeatures());
    b.devices = m.at("devices").get<std::vector<std::string>>();
    for (const json &j : m.at("inputs"))
      b.inputs.push_back(parseSlot(j));
    for (const json &j : m.at("outputs"))
      b.outputs.push_back(parseSlot(j));
    if (b.mode == "train") {
      const json &t = m.at("training");
      b.training.batchSize = integer<int64_t>(t.at("batch_size"));
      b.training.microBatches = integer<int64_t>(t.at("micro_batches"));
      b.training.loss = t.at("loss").get<std::string>();
      b.training.ignoreIndex = integer<int64_t>(t.at("ignore_index"));
      const json &o = t.at("optimizer");
      b.training.optimizer = o.at("kind").get<std::string>();
      b.training.lr = o.at("lr").get<double>();
      b.training.momentum = o.at("momentum").get<double>();
      b.training.nesterov = o.at("nesterov").get<bool>();
      b.training.weightDecay = o.at("weight_decay").get<double>();
      b.training.beta1 = o.value("beta1", 0.9);
      b.training.beta2 = o.value("beta2", 0.999);
      b.training.eps = o.value("eps", 1e-8);
      b.training.dataParallel = integer(t, "data_parallel", int64_t(1));
      if (b.training.microBatches < 1 || b.training.batchSize < 1)
        fail(path, "manifest.json", "invalid training batch sizes");
      if (b.training.dataParallel < 1 || b.training.dataParallel > 4096)
        fail(path, "manifest.json", "invalid data_parallel");
    }
    for (const json &j : m.at("stages")) {
      StageSpec s;
      s.index = integer<int64_t>(j.at("index"));
      s.device = j.at("device").get<std::string>();
      s.rank = integer<int64_t>(j, "rank", int64_t(0));
      if (s.rank < 0 || s.rank > 4095)
        fail(path, "manifest.json",
             "stage " + std::to_string(s.index) + " has an invalid rank");
      if (j.contains("replica_ranks"))
        for (const json &r : j.at("replica_ranks"))
          s.replicaRanks.push_back(integer<int64_t>(r));
      else
        s.replicaRanks.push_back(s.rank);
      s.library = j.at("library").get<std::string>();
      s.crc32 = integer<uint32_t>(j.at("crc32"));
      if (j.contains("device_code")) {
        const json &d = j.at("device_code");
        StageSpec::DeviceCode code;
        code.arch = d.at("arch").get<std::string>();
        for (const json &k : d.at("kernels"))
          code.kernels.push_back(k.get<std::string>());
        for (auto [key, part] :
             {std::pair<const char *,
                        std::optional<StageSpec::DeviceCode::Part> *>{
                  "ptx", &code.ptx},
              {"cubin", &code.cubin}})
          if (d.contains(key))
            *part = StageSpec::DeviceCode::Part{
                d.at(key).at("file").get<std::string>(),
                integer<int64_t>(d.at(key).at("size")),
                integer<uint32_t>(d.at(key).at("crc32"))};
        if (!code.kernels.empty() && !code.ptx)
          fail(path, "manifest.json",
               "stage " + std::to_string(s.index) +
                   " launches GPU kernels but names no PTX");
        s.deviceCode = std::move(code);
      }
      const json &p = j.at("parameters");
      s.parameters.file = p.at("file").get<std::string>();
      s.parameters.size = integer<int64_t>(p.at("size"));
      s.parameters.crc32 = integer<uint32_t>(p.at("crc32"));
      for (const json &t : p.at("tensors")) {
        TensorSlot slot = parseSlot(t);
        slot.space = "params";
        std::string kind = t.at("kind").get<std::string>();
        std::optional<ParamKind> parsed = paramKindFromName(kind);
        if (!parsed)
          throw BundleError("parameter '" + slot.name +
                            "' has an unknown kind '" + kind + "'");
        slot.kind = *parsed;
        s.parameters.tensors.push_back(slot);
      }
      for (const json &pj : j.at("phases")) {
        PhaseSpec phase;
        phase.role = pj.at("role").get<std::string>();
        phase.entry = pj.at("entry").get<std::string>();
        phase.arenaSize = integer<int64_t>(pj.at("arena_size"));
        if (phase.arenaSize < 0 || phase.arenaSize > kMaxOffset)
          throw BundleError("phase '" + phase.role +
                            "' has an invalid arena_size");
        for (const json &k : pj.at("kernels"))
          phase.kernels.push_back(parseKernel(k));
        if (pj.contains("loops"))
          for (const json &l : pj.at("loops")) {
            LoopSpec loop;
            loop.id = integer<int64_t>(l.at("id"));
            loop.op = l.at("op").get<std::string>();
            if (loop.id != static_cast<int64_t>(phase.loops.size()))
              throw BundleError("phase '" + phase.role +
                                "': loop ids are not consecutive");
            phase.loops.push_back(std::move(loop));
          }
        for (const json &io : pj.at("inputs"))
          phase.inputs.push_back(parseSlot(io));
        for (const json &io : pj.at("outputs"))
          phase.outputs.push_back(parseSlot(io));
        if (pj.contains("arena_of"))
          phase.arenaOf = pj.at("arena_of").get<std::string>();
        s.phases.push_back(std::move(phase));
      }
      if (s.phases.empty())
        fail(path, "manifest.json", "a stage without phases");
      for (const PhaseSpec &phase : s.phases) {
        if (phase.arenaOf.empty())
          continue;
        auto owner = std::find_if(
            s.phases.begin(), s.phases.end(), [&](const PhaseSpec &other) {
              return other.role == phase.arenaOf && other.arenaOf.empty();
            });
        if (phase.arenaOf == phase.role || owner == s.phases.end())
          fail(path, "manifest.json",
               "stage " + std::to_string(s.index) + ": phase '" + phase.role +
                   "' shares the arena of '" + phase.arenaOf +
                   "', which is no other phase with an arena of its own");
      }
      if (b.mode == "train")
        s.wiring = parseWiring(j.at("wiring"), s, /*training=*/true);
      else if (j.contains("wiring"))
        s.wiring = parseWiring(j.at("wiring"), s, /*training=*/false);
      b.stages.push_back(std::move(s));
    }
    // Replica r of a stage on rank r * (ranks of a replica) + its rank.
    int64_t perReplica = b.ranksPerReplica();
    for (const StageSpec &s : b.stages) {
      bool ok = static_cast<int64_t>(s.replicaRanks.size()) ==
                b.training.dataParallel;
      for (size_t r = 0; ok && r < s.replicaRanks.size(); ++r)
        ok = s.replicaRanks[r] == static_cast<int64_t>(r) * perReplica + s.rank;
      if (!ok)
        fail(path, "manifest.json",
             "stage " + std::to_string(s.index) +
                 "'s replica_ranks do not place replica r on rank r * " +
                 std::to_string(perReplica) + " + " + std::to_string(s.rank));
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
      checkTies(b.stages);
      // Stages taking turns on a device run in one process.
      std::map<int64_t, int64_t> groupRank;
      for (const StreamSpec &stream : b.schedule.streams)
        if (stream.deviceGroup >= 0 &&
            groupRank.emplace(stream.deviceGroup, b.stages[stream.stage].rank)
                    .first->second != b.stages[stream.stage].rank)
          fail(path, "manifest.json",
               "stage " + std::to_string(stream.stage) +
                   " takes turns on a device of another rank");
    } else if (b.stages.size() != 1) {
      // Pipelined inference: the stages' forwards in one process, each
      // passing its activations on.
      for (size_t i = 0; i < b.stages.size(); ++i) {
        const StageSpec &s = b.stages[i];
        if (!m.at("stages")[i].contains("wiring"))
          fail(path, "manifest.json",
               "stage " + std::to_string(s.index) +
                   " of an inference bundle of several stages has no wiring");
      }
      checkMessages(b.stages);
      checkInferenceStages(b);
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
    if (s.deviceCode)
      for (const auto &part : {s.deviceCode->ptx, s.deviceCode->cubin})
        if (part)
          parts.push_back(part->file);
  }
  for (const std::string &file : parts)
    if (file.empty() || file.find('/') != std::string::npos ||
        file.find("..") != std::string::npos)
      fail(path, "manifest.json", "invalid part name '" + file + "'");

  for (StageSpec &s : b.stages) {
    ParameterBlob &blob = s.parameters;
    // Its checksum is checked as its stage reads it (readParameters): once,
    // and only by the process that runs the stage.
    openPart(b, blob.file, blob.size);
    for (const TensorSlot &t : blob.tensors)
      checkFits(path, t, 0, blob.size);
    checkPart(b, s.library, -1, s.crc32);
    if (s.deviceCode)
      for (const auto &part : {s.deviceCode->ptx, s.deviceCode->cubin})
        if (part)
          checkPart(b, part->file, part->size, part->crc32);
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
    checkPart(b, file, -1, integer(src, "crc32", 0u));
    b.sourceModel = file;
  }
  checkDeviceSyntax(b);
  // A bundle of several ranks: each rank checks its own stages' devices on
  // its own host (TrainingSession).
  if (b.rankCount() == 1)
    checkHostHasDevices(b, b.devices);
  return b;
}

void checkHostHasDevices(const Bundle &b,
                         const std::vector<std::string> &devices) {
  for (const std::string &text : devices) {
    if (text == "cpu")
      continue; // the whole host, unpinned
    for (const Device &d : parseDevices(text))
      if (std::string missing = deviceMissing(d); !missing.empty())
        fail(b.path, "devices",
             "the bundle needs " + d.str() + " but " + missing);
  }
}

} // namespace gpipe::runtime
