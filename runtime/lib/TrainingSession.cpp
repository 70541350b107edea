#include "gpipe/runtime/TrainingSession.h"

#include "ByteStream.h"
#include "Checkpoint.h"
#include "Clock.h"
#include "InProcessTransport.h"
#include "ProcessMemory.h"
#include "Reducer.h"
#include "StepProfile.h"
#include "StreamRunner.h"
#include "TraceWriter.h"

#include "DeviceWorker.h"
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/ProcessGroup.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>

namespace gpipe::runtime {

/// One stage of the pipeline: its schedule interpreter and its device's
/// thread (null: the caller's thread).
struct TrainingSession::Stage {
  std::unique_ptr<DeviceWorker> worker;
  /// The sums over the stage's data-parallel replicas (null: one replica).
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<StreamRunner> runner;
};

namespace {
/// The idle share of `devices` devices busy `busy` seconds in all over
/// `seconds` of wall time: 1 - busy / (devices x seconds).
double idleShare(double busy, double seconds, size_t devices) {
  if (seconds <= 0 || devices == 0)
    return 0;
  return 1 - busy / (seconds * static_cast<double>(devices));
}

double median(std::vector<double> values) {
  auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}
} // namespace

TrainingSession::~TrainingSession() = default;

std::vector<int> TrainingSession::driverCores() const {
  for (const std::unique_ptr<Stage> &stage : stages)
    if (stage && stage->worker && !stage->worker->pinnedCores().empty())
      return stage->worker->pinnedCores();
  return {};
}

TrainingSession::TrainingSession(const std::string &bundlePath)
    : TrainingSession(bundlePath, nullptr) {}

TrainingSession::TrainingSession(const std::string &bundlePath,
                                 bool allStagesHere)
    : TrainingSession(bundlePath, nullptr, nullptr, nullptr, allStagesHere) {}

TrainingSession::TrainingSession(const std::string &bundlePath,
                                 ProcessGroup &group)
    : TrainingSession(bundlePath, nullptr, nullptr, &group) {}

TrainingSession::TrainingSession(const std::string &bundlePath,
                                 std::unique_ptr<Transport> transport_,
                                 BackendFactory backends, ProcessGroup *group_,
                                 bool allStagesHere)
    : bundle_(loadBundle(bundlePath)), group(group_),
      transport(std::move(transport_)) {
  if (!backends)
    backends = createBackend;
  startResident = residentBytes();
  auto fail = [&](const std::string &why) {
    return BundleError(bundlePath + ": manifest.json: " + why);
  };
  if (bundle_.mode != "train")
    throw BundleError(bundlePath + ": manifest.json: an '" + bundle_.mode +
                      "' bundle cannot train (compile with --mode=train)");
  const std::string &kind = bundle_.training.optimizer;
  if (kind != "sgd" && kind != "adam" && kind != "adamw")
    throw fail("unknown optimizer '" + kind + "'");
  lr_ = bundle_.training.lr;
  size_t k = bundle_.stages.size();
  int64_t ranks = bundle_.rankCount();
  int64_t replicas = bundle_.training.dataParallel;
  std::string launch = "mpirun -np " + std::to_string(ranks) + " gpipe-run ...";
  if (replicas > 1 && !group)
    throw BundleError(
        bundlePath + ": the bundle trains " + std::to_string(replicas) +
        " data-parallel replicas, one or more processes each (" +
        std::to_string(ranks) + " ranks): launch it with " + launch);
  if (ranks > 1 && !group && !allStagesHere)
    throw BundleError(bundlePath + ": the bundle's stages run in " +
                      std::to_string(ranks) + " processes (ranks 0.." +
                      std::to_string(ranks - 1) + "): launch it with " +
                      launch +
                      " (or run every stage here with "
                      "--in-one-process)");
  if (group && group->size() != ranks)
    throw BundleError(bundlePath + ": the bundle's stages are on " +
                      std::to_string(ranks) + " rank(s), but mpirun started " +
                      std::to_string(group->size()) + " processes (use " +
                      "mpirun -np " + std::to_string(ranks) + ")");
  if (!group && ranks > 1) // every stage here
    for (StageSpec &spec : bundle_.stages)
      spec.rank = 0, spec.replicaRanks = {0};
  ranks = bundle_.rankCount();
  int64_t perReplica = bundle_.ranksPerReplica();
  worldRank = group ? group->rank() : 0;
  replica_ = worldRank / perReplica;
  localRank = worldRank % perReplica;
  ownsLastStage = bundle_.stages.back().rank == localRank;
  std::vector<std::string> localDevices;
  for (const StageSpec &spec : bundle_.stages)
    if (spec.rank == localRank)
      localDevices.push_back(spec.device);
  // Of a bundle of several ranks each rank checks its own devices on its
  // own host (loadBundle checked those of a bundle of one).
  checkHostHasDevices(bundle_, localDevices);
  if (group && ranks > 1)
    findSharedCores(localDevices);
  if (!transport && ranks > 1) {
    // The stages of this rank's replica.
    std::vector<int64_t> stageRanks;
    for (const StageSpec &spec : bundle_.stages)
      stageRanks.push_back(spec.replicaRanks.at(replica_));
    transport = group->createTransport(stageRanks);
  }
  if (!transport)
    transport = std::make_unique<InProcessTransport>(static_cast<int64_t>(k));
  std::set<std::string> seenInputs, seenLocal;
  for (size_t s = 0; s < k; ++s) {
    StageSpec &spec = bundle_.stages[s];
    const StreamSpec &stream = bundle_.schedule.streams.at(s);
    // A rank knows every stage's data inputs; it reads those of its own
    // stages and loads and runs its own stages only.
    // (A data input may feed several stages, e.g. token ids that also
    // make a mask further on.)
    if (const PhaseSpec *fwd = spec.phase("forward"))
      for (const TensorSlot &in : fwd->inputs) {
        if (in.role != Role::Data)
          continue;
        if (seenInputs.insert(in.name).second)
          dataInputs_.push_back(&in);
        if (spec.rank == localRank && seenLocal.insert(in.name).second)
          localDataInputs_.push_back(&in);
      }
    if (spec.rank != localRank)
      continue;
    auto stage = std::make_unique<Stage>();
    if (spec.device != "cpu") {
      std::vector<Device> devices = parseDevices(spec.device);
      if (devices.size() != 1)
        throw fail("stage " + std::to_string(s) + " is on '" + spec.device +
                   "': a stage runs on one device");
      // A CPU stage's thread is pinned to its cores; a GPU stage's thread
      // only drives its GPU, unpinned.
      stage->worker = std::make_unique<DeviceWorker>(
          devices[0].kind == DeviceKind::Cpu ? devices[0].ids
                                             : std::vector<int>{});
    } else if (k > 1 || perReplica > 1) {
      throw fail("a pipeline stage must name its device");
    }
    if (replicas > 1)
      stage->reducer =
          group->createReducer(spec.replicaRanks, static_cast<int>(s));
    if (s + 1 == k && (spec.wiring.loss < 0 || spec.wiring.lossGrad < 0))
      throw fail("the last stage needs a 'loss' output and a 'loss_grad' "
                 "input");
    // oneDNN sizes a primitive's parallel work for the threads of the
    // thread that creates it: the device's own.
    auto load = [&] {
      stage->runner = std::make_unique<StreamRunner>(
          spec, stream,
          std::make_unique<StageExecutor>(bundle_, spec, backends(spec.device)),
          *transport, stage->reducer.get());
    };
    if (stage->worker) {
      stage->worker->start(load);
      stage->worker->wait();
    } else {
      load();
    }
    if (s + 1 == k) {
      const PhaseSpec &fwd = stage->runner->forwardPhase();
      const TensorSlot &loss = fwd.outputs[spec.wiring.loss];
      if (loss.dtype != DType::F32 || loss.numElements() != 1)
        throw fail("the loss must be a float32 scalar");
      if (spec.wiring.output >= 0)
        modelOutput = &fwd.outputs[spec.wiring.output];
    }
    // Stages of one device group take turns on it.
    if (stream.deviceGroup >= 0) {
      std::unique_ptr<DeviceTurn> &turn = deviceTurns[stream.deviceGroup];
      if (!turn)
        turn = std::make_unique<DeviceTurn>();
      stage->runner->setDeviceTurn(turn.get());
    }
    stages.push_back(std::move(stage));
  }
}

int64_t TrainingSession::classCount() const {
  // Logits with the classes on the last axis: [N, C] or [B, T, V].
  return modelOutput && modelOutput->shape.size() >= 2
             ? modelOutput->shape.back()
             : 0;
}

bool TrainingSession::holdsSamples(const TensorSlot &slot, const HostTensor &t,
                                   int64_t samples) const {
  const std::vector<int64_t> &expected = slot.shape;
  if (expected.empty() || t.dtype != slot.dtype || t.shape.empty() ||
      t.shape[0] != samples)
    return false;
  if (t.shape.size() == expected.size() &&
      std::equal(expected.begin() + 1, expected.end(), t.shape.begin() + 1))
    return true;
  // Labels [N, T] for logits [B*T, V]: T labels a sample, as many as the
  // slot's rows per sample.
  int64_t perSample = 1;
  for (size_t i = 1; i < t.shape.size(); ++i)
    perSample *= t.shape[i];
  int64_t b = microBatchSize();
  return slot.name == "labels" && expected.size() == 1 && b > 0 &&
         t.shape.size() > 1 && expected[0] == b * perSample;
}

double TrainingSession::step(const std::map<std::string, HostTensor> &batch) {
  int64_t n = batchSize();
  for (const TensorSlot *slot : localDataInputs()) {
    auto it = batch.find(slot->name);
    if (it == batch.end())
      throw InputError("training data has no '" + slot->name + "'");
    const HostTensor &t = it->second;
    if (!holdsSamples(*slot, t, n))
      throw InputError("training batch '" + slot->name + "' is " +
                       t.describe() + "; each step needs " + std::to_string(n) +
                       " rows of " + std::string(dtypeName(slot->dtype)) +
                       " with the model's other dimensions");
  }
  if (tracing && traceOrigin == 0) {
    // Across ranks the traces share an origin. The steady clock is one
    // clock on one host: the ranks on rank 0's host take its origin
    // exactly; a rank on another host takes the end of a barrier (as
    // close as the barrier's latency).
    if (acrossRanks())
      group->barrier();
    traceOrigin = steadySeconds();
    if (acrossRanks()) {
      // The host's name as a double, exactly (53 bits of its hash).
      double host = static_cast<double>(
          std::hash<std::string>()(group->host()) & ((uint64_t(1) << 53) - 1));
      double rootHost = group->broadcast(host, 0);
      double rootOrigin = group->broadcast(traceOrigin, 0);
      if (rootHost == host)
        traceOrigin = rootOrigin;
    }
  }
  double start = steadySeconds();
  double busyBefore = 0;
  for (const auto &st : stages)
    busyBefore += st->runner->busySeconds();
  // This step's optimizer hyper-parameters, the same for every stage.
  const TrainingSpec &t = bundle_.training;
  double stepNumber = static_cast<double>(steps + 1);
  StepContext context;
  context.batch = &batch;
  context.step = steps;
  context.seed = randomSeed;
  context.microBatches = t.microBatches;
  context.replicas = t.dataParallel;
  context.hyper = {
      static_cast<float>(lr_),
      static_cast<float>(t.weightDecay),
      static_cast<float>(t.momentum),
      static_cast<float>(t.beta1),
      static_cast<float>(t.beta2),
      static_cast<float>(t.eps),
      static_cast<float>(lr_ / (1 - std::pow(t.beta1, stepNumber))),
      static_cast<float>(std::sqrt(1 - std::pow(t.beta2, stepNumber)))};
  for (auto &st : stages)
    st->runner->setTracing(tracing);
  if (stages.size() == 1 && !stages[0]->worker) {
    stages[0]->runner->runStep(context);
  } else {
    for (auto &[group, turn] : deviceTurns)
      turn->reset();
    for (auto &st : stages) {
      StreamRunner *runner = st->runner.get();
      int64_t index = runner->spec().index;
      st->worker->start([this, runner, index, &context] {
        try {
          runner->runStep(context);
        } catch (const std::exception &e) {
          // Wake the stages waiting for this one.
          std::string why =
              "stage " + std::to_string(index) + " failed: " + e.what();
          transport->abort(why);
          for (auto &other : stages)
            if (other->reducer)
              other->reducer->abort(why);
          for (auto &[group, turn] : deviceTurns)
            turn->abort(why);
          throw;
        }
      });
    }
    std::exception_ptr first, any;
    for (auto &st : stages) {
      try {
        st->worker->wait();
      } catch (const TransportError &) {
        any = std::current_exception();
      } catch (...) {
        if (!first)
          first = std::current_exception();
      }
    }
    transport->reset();
    for (auto &st : stages)
      if (st->reducer)
        st->reducer->reset();
    if (first || any) {
      for (auto &st : stages)
        st->runner->clearStep();
      std::rethrow_exception(first ? first : any);
    }
  }
  ++steps;
  ++statSteps;
  ++profileSteps;
  double loss = ownsLastStage
                    ? stages.back()->runner->lossSum() /
                          static_cast<double>(bundle_.training.microBatches)
                    : 0.0;
  // The last stage's rank has the loss; every rank returns it. With
  // data parallelism: the mean of the replicas' losses, in replica order.
  if (group && t.dataParallel > 1)
    loss = group->sum(ownsLastStage ? loss : 0.0) /
           static_cast<double>(t.dataParallel);
  else if (acrossRanks())
    loss = group->broadcast(loss, bundle_.stages.back().rank);
  // The step ends when every rank has its loss: a rank whose stages are
  // done waits here for the last stage's, which the step's time must hold
  // (measured from it before, rank 0's stage of a two-rank ResNet-18
  // pipeline reported 54 ms a step where the steps came every 70).
  double took = steadySeconds() - start;
  statSeconds += took;
  // The step's idle share of this rank's devices (stages sharing a device,
  // an interleaved schedule's, count as one).
  double busy = -busyBefore;
  std::set<std::string> devices;
  for (const auto &st : stages) {
    busy += st->runner->busySeconds();
    devices.insert(st->runner->spec().device);
  }
  double idle = idleShare(busy, took, devices.size());
  const size_t kept = 1000;
  if (recentSteps.size() < kept) {
    recentSteps.push_back(took);
    recentIdle.push_back(idle);
  } else {
    recentSteps[static_cast<size_t>(statSteps - 1) % kept] = took;
    recentIdle[static_cast<size_t>(statSteps - 1) % kept] = idle;
  }
  return loss;
}

void TrainingSession::setHyperParameter(const std::string &name, double value) {
  TrainingSpec &t = bundle_.training;
  std::map<std::string, double *> known{{"momentum", &t.momentum},
                                        {"weight_decay", &t.weightDecay},
                                        {"beta1", &t.beta1},
                                        {"beta2", &t.beta2},
                                        {"eps", &t.eps}};
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  auto it = known.find(name);
  bool used = false;
  for (const StageSpec &stage : bundle_.stages)
    used |=
        std::any_of(stage.wiring.hyper.begin(), stage.wiring.hyper.end(),
                    [&](const auto &h) { return hyperName(h.first) == name; });
  if (it == known.end() || !used)
    throw InputError(flag + ": the bundle's " + t.optimizer +
                     " optimizer has no such hyper-parameter");
  bool isBeta = name == "beta1" || name == "beta2";
  if (!std::isfinite(value) || value < 0 || (isBeta && value >= 1)) {
    std::ostringstream os;
    os << flag << "=" << value << " is out of range ("
       << (isBeta ? "[0, 1)" : ">= 0") << ")";
    throw InputError(os.str());
  }
  if (name == "momentum" && value != 0 && t.momentum == 0)
    throw InputError("--momentum: the bundle was compiled without momentum "
                     "(no momentum buffer); recompile with --momentum");
  *it->second = value;
}

HostTensor
TrainingSession::evaluate(const std::map<std::string, HostTensor> &microBatch) {
  if (bundle_.stages.back().wiring.output < 0)
    throw InputError("the model has no output besides its loss");
  // The stages' forwards one after the other, each on its device's thread
  // (its cores and the oneDNN threads its primitives were made for: on
  // this thread they contend with the workers' pinned threads), each
  // reading its stage inputs straight from the previous stage's arena, or
  // (the previous stage on another rank) from a message.
  struct Restore {
    std::vector<std::unique_ptr<Stage>> &stages;
    ~Restore() {
      for (auto &st : stages)
        st->runner->executor().setUpdateState(true);
    }
  } restore{stages};
  int64_t k = static_cast<int64_t>(bundle_.stages.size());
  const StreamRunner *previous = nullptr;
  for (auto &st : stages) {
    StreamRunner &runner = *st->runner;
    int64_t s = runner.spec().index;
    bool fromRank = s > 0 && (!previous || previous->spec().index != s - 1);
    bool toRank = s + 1 < k && bundle_.stages[s + 1].rank != localRank;
    auto forward = [&] {
      if (fromRank)
        runner.receiveForEvaluation();
      runner.evaluate(microBatch, fromRank ? nullptr : previous);
      if (toRank)
        runner.sendForEvaluation();
    };
    if (st->worker) {
      st->worker->start(forward);
      st->worker->wait();
    } else {
      forward();
    }
    previous = &runner;
  }
  if (acrossRanks())
    transport->reset(); // the sends taken
  if (!ownsLastStage)
    return {};
  HostTensor out;
  out.dtype = modelOutput->dtype;
  out.shape = modelOutput->shape;
  out.data.resize(modelOutput->byteSize());
  StreamRunner &last = *stages.back()->runner;
  last.executor().read(last.forwardIndex(), *modelOutput, out.data.data());
  return out;
}

double TrainingSession::fromLastStage(double value) {
  if (!acrossRanks())
    return value;
  return group->broadcast(value, bundle_.stages.back().rank);
}

void TrainingSession::findSharedCores(
    const std::vector<std::string> &localDevices) {
  // Rank 0 learns every rank's host and pinned cores.
  ByteWriter mine;
  mine.putString(group->host());
  std::set<int> cores;
  for (const std::string &text : localDevices)
    if (text != "cpu")
      for (const Device &d : parseDevices(text))
        if (d.kind == DeviceKind::Cpu)
          cores.insert(d.ids.begin(), d.ids.end());
  mine.put<uint64_t>(cores.size());
  for (int c : cores)
    mine.put<int32_t>(c);
  std::vector<std::string> all = group->gather(mine.str(), 0);
  // host -> core -> the ranks pinning it.
  std::map<std::string, std::map<int, std::vector<int64_t>>> pinned;
  for (size_t r = 0; r < all.size(); ++r) {
    ByteReader in(all[r], "a rank's placement");
    std::string host = in.getString();
    for (uint64_t n = in.get<uint64_t>(); n > 0; --n)
      pinned[host][in.get<int32_t>()].push_back(static_cast<int64_t>(r));
  }
  for (auto &[host, byCore] : pinned) {
    // One line per set of ranks sharing cores.
    std::map<std::vector<int64_t>, std::vector<int>> shared;
    for (auto &[core, ranks] : byCore)
      if (ranks.size() > 1)
        shared[ranks].push_back(core);
    for (auto &[ranks, coreList] : shared) {
      std::string who, list;
      for (size_t i = 0; i < ranks.size(); ++i)
        who += (i == 0                  ? ""
                : i + 1 == ranks.size() ? " and "
                                        : ", ") +
               std::to_string(ranks[i]);
      for (int c : coreList)
        list += (list.empty() ? "" : ",") + std::to_string(c);
      warnings_.push_back(
          "ranks " + who + " on host " + host + " pin the same cores (" + list +
          "): their stages take turns on them. Give each rank of a host "
          "cores of its own (gpipe-opt --devices) or start the ranks on "
          "different hosts (mpirun --hostfile)");
    }
  }
}

double TrainingSession::fromRankZero(double value) {
  return acrossRanks() ? group->broadcast(value, 0) : value;
}

namespace {
/// The tensors of a map as bytes (name, dtype, shape, data), for a gather.
std::string serialize(const std::map<std::string, HostTensor> &tensors) {
  ByteWriter out;
  for (const auto &[name, t] : tensors) {
    out.putString(name);
    out.put<int32_t>(static_cast<int32_t>(t.dtype));
    out.put<uint64_t>(t.shape.size());
    out.putBytes(t.shape.data(), t.shape.size() * sizeof(int64_t));
    out.put<uint64_t>(t.data.size());
    out.putBytes(t.data.data(), t.data.size());
  }
  return std::move(out.str());
}

void deserialize(const std::string &bytes,
                 std::map<std::string, HostTensor> &tensors) {
  ByteReader in(bytes, "a rank's parameters");
  while (!in.done()) {
    std::string name = in.getString();
    HostTensor t;
    t.dtype = static_cast<DType>(in.get<int32_t>());
    t.shape.resize(in.get<uint64_t>());
    in.getBytes(t.shape.data(), t.shape.size() * sizeof(int64_t));
    t.data.resize(in.get<uint64_t>());
    in.getBytes(t.data.data(), t.data.size());
    tensors[name] = std::move(t);
  }
}
} // namespace

std::map<std::string, HostTensor> TrainingSession::parameters() const {
  std::map<std::string, HostTensor> out = localParameters();
  // Across ranks: every rank's tensors to rank 0 (a tied weight comes
  // from each rank that holds it, equal).
  if (acrossRanks()) {
    // Replicas hold the same values: the first one's are enough.
    std::vector<std::string> parts =
        group->gather(replica_ == 0 ? serialize(out) : std::string(), 0);
    for (const std::string &part : parts)
      deserialize(part, out);
    if (group->rank() != 0)
      out.clear();
  }
  return out;
}

std::map<std::string, HostTensor> TrainingSession::localParameters() const {
  std::map<std::string, HostTensor> out;
  for (auto [stage, p] : modelState()) {
    if (p->kind == ParamKind::OptimizerState)
      continue;
    HostTensor t;
    t.dtype = p->dtype;
    t.shape = p->shape;
    t.data.resize(p->byteSize());
    stage->runner->executor().readParameter(*p, t.data.data());
    out[p->name] = std::move(t);
  }
  return out;
}

void TrainingSession::enableOpProfile() {
  for (auto &st : stages) {
    st->runner->executor().setKernelProfile(true);
    st->runner->setProfiling(true);
  }
  profileSteps = 0;
}

using Part = TrainingSession::StageStats::Part;

std::map<std::string, std::pair<double, double>>
TrainingSession::opProfile() const {
  std::map<std::string, std::pair<double, double>> out;
  double runs = static_cast<double>(profileSteps) *
                static_cast<double>(bundle_.training.microBatches);
  if (runs == 0)
    return out;
  for (const auto &st : stages) {
    const StreamRunner &runner = *st->runner;
    const auto &totals = runner.executor().kernelSeconds();
    size_t fwd = runner.forwardIndex(), bwd = runner.backwardIndex();
    const auto &loopTotals = runner.executor().loopSeconds();
    // The kernels and the generated loops alike, by the op they compute
    // (a gradient's with its forward op's name).
    auto add = [&](size_t phase, const auto &specs,
                   const std::vector<std::vector<double>> &seconds) {
      if (phase >= seconds.size())
        return;
      for (size_t i = 0; i < specs.size() && i < seconds[phase].size(); ++i)
        if (!specs[i].op.empty()) {
          auto &entry = out[specs[i].op];
          (phase == fwd ? entry.first : entry.second) +=
              seconds[phase][i] / runs;
        }
    };
    for (size_t phase : {fwd, bwd, runner.weightIndex()}) {
      if (phase >= runner.spec().phases.size())
        continue;
      add(phase, runner.spec().phases[phase].kernels, totals);
      add(phase, runner.spec().phases[phase].loops, loopTotals);
    }
    // The rest of the stage's steps, as rows of its own.
    for (const Part &p : stepParts(runner)) {
      if (p.name == "kernels" || p.name == "generated loops")
        continue; // the ops' rows above
      auto &entry = out["(runtime) stage " +
                        std::to_string(runner.spec().index) + ": " + p.name];
      entry.first += p.forward / runs;
      entry.second += p.backward / runs;
    }
  }
  if (!acrossRanks())
    return out;
  // Across ranks: the first replica's ops, by rank, to rank 0.
  ByteWriter mine;
  if (replica_ == 0)
    for (auto &[op, t] : out) {
      mine.putString(op);
      mine.put(t.first);
      mine.put(t.second);
    }
  std::vector<std::string> parts = group->gather(mine.str(), 0);
  out.clear();
  for (const std::string &part : parts) {
    ByteReader in(part, "a rank's op times");
    while (!in.done()) {
      auto &entry = out[in.getString()];
      entry.first += in.get<double>();
      entry.second += in.get<double>();
    }
  }
  return out;
}

double TrainingSession::Stats::bubble() const {
  if (stages.empty())
    return 0;
  // The devices' idle share: stages sharing a device (an interleaved
  // schedule's) count as one device.
  double busy = 0;
  std::set<std::pair<int64_t, std::string>> devices;
  for (const StageStats &s : stages) {
    busy += s.busySeconds;
    devices.insert({s.rank, s.device});
  }
  return idleShare(busy, stepSeconds, devices.size());
}

TrainingSession::Stats TrainingSession::stats() const {
  Stats out;
  out.steps = statSteps;
  out.stepSeconds = statSeconds;
  if (!recentSteps.empty()) {
    out.medianStepSeconds = median(recentSteps);
    out.medianBubble = median(recentIdle);
    out.medianSteps = static_cast<int64_t>(recentSteps.size());
  }
  out.predictedStepSeconds = bundle_.schedule.predictedStepSeconds;
  out.predictedBubble = bundle_.schedule.predictedBubble;
  for (const auto &st : stages) {
    const StreamRunner &runner = *st->runner;
    StageStats s;
    s.index = runner.spec().index;
    s.rank = runner.spec().rank;
    s.device = runner.spec().device;
    s.busySeconds = runner.busySeconds();
    s.optimizerSeconds = runner.optimizerSeconds();
    s.allReduceSeconds = runner.replicaSumSeconds();
    s.allReduceWaitSeconds = runner.replicaWaitSeconds();
    s.allocatedBytes =
        runner.executor().allocatedBytes() + runner.stashAllocated();
    s.predictedPeakBytes =
        bundle_.schedule.streams[runner.spec().index].predictedPeakBytes;
    if (profileSteps > 0 && runner.breakdown().steps > 0) {
      double n = static_cast<double>(profileSteps);
      s.profiledParts = stepParts(runner);
      for (Part &p : s.profiledParts) {
        p.forward /= n;
        p.backward /= n;
      }
      s.profiledStepSeconds = runner.breakdown().steps / n;
    }
    out.stages.push_back(s);
  }
  return out;
}

std::vector<TrainingSession::MemoryAccount>
TrainingSession::memoryAccounts(int64_t dataBytes) const {
  MemoryAccount mine;
  mine.rank = worldRank;
  mine.peak = peakResidentBytes();
  mine.start = startResident;
  mine.data = dataBytes;
  for (const auto &st : stages) {
    const StreamRunner &runner = *st->runner;
    // The compiler's plan of the stage: arenas, parameters, stash, and
    // the messages and tied gradients' host copies the stage runner holds.
    mine.plan +=
        bundle_.schedule.streams[runner.spec().index].predictedPeakBytes;
    mine.kernels += runner.executor().device().kernelBytes();
  }
  if (!acrossRanks())
    return {mine};
  ByteWriter out;
  for (int64_t v :
       {mine.rank, mine.peak, mine.plan, mine.kernels, mine.data, mine.start})
    out.put<int64_t>(v);
  std::vector<std::string> all = group->gather(out.str(), 0);
  if (worldRank != 0)
    return {mine};
  std::vector<MemoryAccount> accounts;
  for (const std::string &bytes : all) {
    ByteReader in(bytes, "a rank's memory account");
    MemoryAccount a;
    for (int64_t *v :
         {&a.rank, &a.peak, &a.plan, &a.kernels, &a.data, &a.start})
      *v = in.get<int64_t>();
    accounts.push_back(a);
  }
  return accounts;
}

namespace {
/// The trace's event categories, by the code a rank sends them as (an
/// unknown code reads as the last).
constexpr const char *kCategories[] = {"instruction", "kernel", "loop",
                                       "runtime"};
uint8_t categoryCode(const char *category) {
  for (size_t i = 0; i < std::size(kCategories); ++i)
    if (std::strcmp(category, kCategories[i]) == 0)
      return static_cast<uint8_t>(i);
  return static_cast<uint8_t>(std::size(kCategories) - 1);
}

/// A traced instruction as a trace event: "forward 3", with its step,
/// micro-batch and bytes; a send and its receive share a flow id.
TraceTrack::Event instructionEvent(const StreamRunner::TraceEvent &e,
                                   int64_t stage, double origin) {
  using Op = Instruction::Op;
  TraceTrack::Event event;
  const Instruction &instr = e.instr;
  event.name = std::string(instructionName(instr.op));
  if (instr.microBatch >= 0)
    event.name += " " + std::to_string(instr.microBatch);
  event.category = "instruction";
  event.begin = e.begin - origin;
  event.end = e.end - origin;
  event.step = e.step;
  nlohmann::json args{{"step", e.step + 1}, {"stage", stage}};
  if (instr.microBatch >= 0)
    args["micro_batch"] = instr.microBatch;
  if (isTransfer(instr.op)) {
    bool sending =
        instr.op == Op::SendActivation || instr.op == Op::SendGradient;
    bool activation =
        instr.op == Op::SendActivation || instr.op == Op::RecvActivation;
    int64_t from = sending ? stage : instr.peer;
    int64_t to = sending ? instr.peer : stage;
    args["bytes"] = e.bytes;
    args[sending ? "to_stage" : "from_stage"] = instr.peer;
    uint64_t id =
        1 + ((((static_cast<uint64_t>(e.step) * 2 + activation) * 4096 +
               static_cast<uint64_t>(from)) *
                  4096 +
              static_cast<uint64_t>(to)) *
                 65536 +
             static_cast<uint64_t>(instr.microBatch));
    (sending ? event.flowOut : event.flowIn) = id;
  }
  event.args = args.dump();
  return event;
}
} // namespace

std::vector<TraceTrack> TrainingSession::collectTrace() const {
  std::vector<TraceTrack> tracks;
  for (const auto &st : stages) {
    const StreamRunner &runner = *st->runner;
    TraceTrack track;
    track.stage = runner.spec().index;
    track.name = "stage " + std::to_string(runner.spec().index) + " on ";
    if (acrossRanks())
      track.name += "rank " + std::to_string(worldRank) + " ";
    track.name += runner.spec().device;
    int64_t stage = runner.spec().index;
    for (const StreamRunner::TraceEvent &e : runner.trace())
      track.events.push_back(instructionEvent(e, stage, traceOrigin));
    for (const StageExecutor::KernelEvent &e : runner.kernelTrace()) {
      // Named by the model op (ONNX node) it computes, with its kind.
      const std::string &op = *e.op, &kind = *e.kind;
      TraceTrack::Event event;
      event.name = op.empty() ? kind : op + " (" + kind + ")";
      event.category = *e.phase == "runtime" ? "runtime"
                       : kind == "loop"      ? "loop"
                                             : "kernel";
      event.begin = e.begin - traceOrigin;
      event.end = e.end - traceOrigin;
      event.args =
          nlohmann::json{{"kernel", kind}, {"node", op}, {"phase", *e.phase}}
              .dump();
      track.events.push_back(std::move(event));
    }
    tracks.push_back(std::move(track));
  }
  if (!acrossRanks())
    return tracks;
  // Every rank's tracks, times relative to the shared origin, to rank 0.
  ByteWriter mine;
  for (const TraceTrack &t : tracks) {
    mine.putString(t.name);
    mine.put<int64_t>(t.stage);
    mine.put<uint64_t>(t.events.size());
    for (const TraceTrack::Event &e : t.events) {
      mine.putString(e.name);
      mine.put<uint8_t>(categoryCode(e.category));
      mine.put(e.begin);
      mine.put(e.end);
      mine.putString(e.args);
      mine.put(e.flowOut);
      mine.put(e.flowIn);
      mine.put(e.step);
    }
  }
  std::vector<std::string> parts = group->gather(mine.str(), 0);
  std::vector<TraceTrack> all;
  if (worldRank != 0)
    return all;
  for (const std::string &part : parts) {
    ByteReader in(part, "a rank's trace");
    while (!in.done()) {
      TraceTrack &t = all.emplace_back();
      t.name = in.getString();
      t.stage = in.get<int64_t>();
      uint64_t n = in.get<uint64_t>();
      for (uint64_t i = 0; i < n; ++i) {
        TraceTrack::Event e;
        e.name = in.getString();
        e.category = kCategories[std::min<size_t>(in.get<uint8_t>(),
                                                  std::size(kCategories) - 1)];
        e.begin = in.get<double>();
        e.end = in.get<double>();
        e.args = in.getString();
        e.flowOut = in.get<uint64_t>();
        e.flowIn = in.get<uint64_t>();
        e.step = in.get<int64_t>();
        t.events.push_back(std::move(e));
      }
    }
  }
  std::sort(all.begin(), all.end(),
            [](const TraceTrack &a, const TraceTrack &b) {
              return a.stage < b.stage;
            });
  return all;
}

void TrainingSession::writeTrace(const std::string &path) const {
  std::vector<TraceTrack> tracks = collectTrace();
  if (worldRank == 0)
    writeChromeTrace(path, tracks, 0.0);
}

namespace {
std::string rowLabel(const Bundle &b, int64_t stage) {
  return timelineRowLabel(stage, b.schedule.streams[stage].device,
                          b.rankCount() > 1 ? b.stages[stage].rank : -1);
}
} // namespace

void TrainingSession::writeReport(const std::string &path,
                                  const std::string &title,
                                  const std::string &text) const {
  std::vector<TraceTrack> tracks = collectTrace();
  if (worldRank != 0)
    return;
  const ScheduleSpec &schedule = bundle_.schedule;
  Timeline predicted;
  predicted.title = "predicted step (by gpipe-opt)";
  predicted.seconds = schedule.predictedStepSeconds;
  for (const StreamSpec &stream : schedule.streams) {
    predicted.rows.push_back(
        {rowLabel(bundle_, stream.stage), stream.predictedTimeline});
    predicted.recompute |= stream.recompute;
  }
  // Each stream runs its instructions once per step, in order: the k-th
  // group of a track's instruction events is step k.
  std::vector<std::vector<const TraceTrack::Event *>> byStage(
      schedule.streams.size());
  for (const TraceTrack &t : tracks)
    if (t.stage >= 0 && t.stage < static_cast<int64_t>(byStage.size()))
      for (const TraceTrack::Event &e : t.events)
        if (std::strcmp(e.category, "instruction") == 0)
          byStage[t.stage].push_back(&e);
  size_t steps = SIZE_MAX;
  for (size_t s = 0; s < byStage.size(); ++s)
    steps = std::min(
        steps,
        byStage[s].size() /
            std::max<size_t>(1, schedule.streams[s].instructions.size()));
  std::vector<Timeline> timelines{predicted};
  if (steps > 0 && steps != SIZE_MAX) {
    auto bounds = [&](size_t k) {
      double begin = INFINITY, end = -INFINITY;
      for (size_t s = 0; s < byStage.size(); ++s) {
        size_t n = schedule.streams[s].instructions.size();
        for (size_t i = k * n; i < (k + 1) * n; ++i) {
          begin = std::min(begin, byStage[s][i]->begin);
          end = std::max(end, byStage[s][i]->end);
        }
      }
      return std::make_pair(begin, end);
    };
    std::vector<std::pair<double, size_t>> lengths;
    for (size_t k = 0; k < steps; ++k) {
      auto [begin, end] = bounds(k);
      lengths.push_back({end - begin, k});
    }
    std::sort(lengths.begin(), lengths.end());
    size_t k = lengths[lengths.size() / 2].second;
    auto [begin, end] = bounds(k);
    Timeline measured;
    measured.title = "measured step " + std::to_string(k + 1) + " of the " +
                     std::to_string(steps) +
                     " traced (the median length) in this run";
    measured.seconds = end - begin;
    measured.recompute = predicted.recompute;
    for (size_t s = 0; s < byStage.size(); ++s) {
      TimelineRow &row = measured.rows.emplace_back();
      row.label = rowLabel(bundle_, static_cast<int64_t>(s));
      size_t n = schedule.streams[s].instructions.size();
      for (size_t i = k * n; i < (k + 1) * n; ++i) {
        const TraceTrack::Event &e = *byStage[s][i];
        std::string name = e.name;
        int64_t microBatch = -1;
        if (size_t space = name.find(' '); space != std::string::npos) {
          microBatch = std::stoll(name.substr(space + 1));
          name.resize(space);
        }
        if (std::string kind = timelineKind(name); !kind.empty())
          row.boxes.push_back(
              {kind, microBatch, e.begin - begin, e.end - begin});
      }
    }
    timelines.push_back(std::move(measured));
  }
  writeFileAtomically(path, timelineReportHTML(title, text, timelines));
}

std::vector<std::pair<const TrainingSession::Stage *, const TensorSlot *>>
TrainingSession::modelState() const {
  std::vector<std::pair<const Stage *, const TensorSlot *>> out;
  for (const auto &st : stages)
    for (const TensorSlot &p : st->runner->spec().parameters.tensors)
      if (p.kind != ParamKind::Constant)
        out.push_back({st.get(), &p});
  return out;
}

uint32_t TrainingSession::modelChecksum() const {
  std::string crcs;
  for (const StageSpec &s : bundle_.stages)
    crcs.append(reinterpret_cast<const char *>(&s.parameters.crc32),
                sizeof(uint32_t));
  return crc32Of(crcs.data(), crcs.size());
}

std::string TrainingSession::checkpointPart(const std::string &dir,
                                            int64_t step) const {
  return dir + "/parts/step-" + std::to_string(step) + ".rank-" +
         std::to_string(worldRank) + ".bin";
}

void TrainingSession::writeState(const std::string &path,
                                 uint64_t extra) const {
  Checkpoint c;
  c.model = modelChecksum();
  c.steps = steps;
  c.batch = batchSize() * replicas();
  c.extra = extra;
  for (auto [stage, p] : modelState()) {
    std::string &bytes = c.tensors.emplace_back(p->byteSize(), '\0');
    stage->runner->executor().readParameter(*p, bytes.data());
  }
  writeCheckpoint(path, c);
}

uint64_t TrainingSession::readState(const std::string &path) {
  Checkpoint c = readCheckpoint(path);
  auto state = modelState();
  bool matches = c.model == modelChecksum() && c.tensors.size() == state.size();
  for (size_t i = 0; matches && i < state.size(); ++i)
    matches = static_cast<int64_t>(c.tensors[i].size()) ==
              state[i].second->byteSize();
  if (!matches)
    throw BundleError(path +
                      ": the checkpoint belongs to another model or bundle");
  if (c.batch != batchSize() * replicas())
    throw BundleError(
        path + ": the checkpoint was trained on batches of " +
        std::to_string(c.batch) + " rows, this bundle takes " +
        std::to_string(batchSize() * replicas()) +
        " per step: its steps and its place in the data would mean "
        "something else (resume with the bundle it was trained with, or "
        "train again without --resume)");
  for (size_t i = 0; i < state.size(); ++i) {
    auto [stage, p] = state[i];
    stage->runner->executor().writeParameter(*p, c.tensors[i].data());
  }
  steps = c.steps;
  return c.extra;
}

namespace {
/// The step a commit file names (docs/distributed.md).
int64_t readCommit(const std::string &path, int64_t ranks) {
  std::optional<std::string> text = readFileBytes(path);
  if (!text)
    throw BundleError(path + ": cannot read the checkpoint commit");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const std::exception &e) {
    throw BundleError(path + ": not a checkpoint commit (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
      !j.contains("ranks") || !j["ranks"].is_number_integer())
    throw BundleError(path + ": not a checkpoint commit (needs 'step' and "
                             "'ranks')");
  if (j["ranks"].get<int64_t>() != ranks)
    throw BundleError(path + ": a checkpoint of " +
                      std::to_string(j["ranks"].get<int64_t>()) +
                      " ranks; this bundle runs on " + std::to_string(ranks));
  return j["step"].get<int64_t>();
}
} // namespace

void TrainingSession::saveCheckpoint(const std::string &dir,
                                     uint64_t extra) const {
  std::filesystem::create_directories(dir);
  if (!acrossRanks()) {
    writeState(dir + "/checkpoint.bin", extra);
    return;
  }
  // Every rank its part; the commit once all have written theirs.
  std::filesystem::create_directories(dir + "/parts");
  writeState(checkpointPart(dir, steps), extra);
  group->barrier();
  if (worldRank == 0) {
    nlohmann::json commit{{"step", steps},
                          {"ranks", bundle_.rankCount()},
                          {"model", modelChecksum()}};
    writeFileAtomically(dir + "/checkpoint.json", commit.dump() + "\n");
  }
  group->barrier();
  // Parts of other steps are of no checkpoint now.
  std::string keep =
      std::filesystem::path(checkpointPart(dir, steps)).filename().string();
  std::string suffix = ".rank-" + std::to_string(worldRank) + ".bin";
  std::error_code ec;
  for (const auto &entry :
       std::filesystem::directory_iterator(dir + "/parts", ec)) {
    std::string name = entry.path().filename().string();
    bool mine =
        name.size() > suffix.size() && name.rfind("step-", 0) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (mine && name != keep)
      std::filesystem::remove(entry.path(), ec);
  }
}

std::optional<uint64_t>
TrainingSession::loadCheckpoint(const std::string &dir) {
  if (!acrossRanks()) {
    std::string path = dir + "/checkpoint.bin";
    if (!std::filesystem::exists(path))
      return std::nullopt;
    return readState(path);
  }
  // Rank 0 reads the commit; every rank its part of that step.
  std::string commit = dir + "/checkpoint.json";
  int64_t step = -1;
  if (worldRank == 0 && std::filesystem::exists(commit))
    step = readCommit(commit, bundle_.rankCount());
  step = static_cast<int64_t>(group->broadcast(static_cast<double>(step), 0));
  if (step < 0)
    return std::nullopt;
  std::string part = checkpointPart(dir, step);
  if (!std::filesystem::exists(part))
    throw BundleError(commit + " names step " + std::to_string(step) +
                      ", but rank " + std::to_string(worldRank) +
                      " has no part " + part +
                      " (every rank needs the checkpoint directory; on "
                      "several hosts, the same path on each)");
  uint64_t extra = readState(part);
  if (steps != step)
    throw BundleError(part + " holds step " + std::to_string(steps) + ", but " +
                      commit + " names step " + std::to_string(step) +
                      ": the checkpoint's parts disagree; refusing to resume");
  return extra;
}

} // namespace gpipe::runtime
