#include "gpipe/runtime/TrainingSession.h"

#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/ParallelFor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

namespace gpipe::runtime {

namespace {
/// The optimizer phase's `hyper:<name>` inputs, in TrainingSession::Hyper
/// order.
constexpr std::pair<const char *, TrainingSession::Hyper> kHyperParameters[] = {
    {"lr", TrainingSession::Hyper::LR},
    {"weight_decay", TrainingSession::Hyper::WeightDecay},
    {"momentum", TrainingSession::Hyper::Momentum},
    {"beta1", TrainingSession::Hyper::Beta1},
    {"beta2", TrainingSession::Hyper::Beta2},
    {"eps", TrainingSession::Hyper::Eps},
    {"step_size", TrainingSession::Hyper::StepSize},
    {"bias_correction2", TrainingSession::Hyper::BiasCorrection2}};

bool startsWith(const std::string &s, const char *prefix) {
  return s.rfind(prefix, 0) == 0;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
} // namespace

/// One stage of the pipeline: its code, its device's thread, how its
/// phases' inputs and outputs connect to the batch, to its neighbours and
/// to its stash, and its per-step state.
struct TrainingSession::Stage {
  int64_t index = 0;
  const StageSpec *spec = nullptr;
  const StreamSpec *stream = nullptr;
  std::unique_ptr<StageExecutor> exec;
  std::unique_ptr<DeviceWorker> worker; // null: the caller's thread
  size_t fwd = 0, bwd = 0, opt = 0;
  const PhaseSpec *fwdSpec = nullptr, *bwdSpec = nullptr, *optSpec = nullptr;

  std::vector<const TensorSlot *> dataIn; // forward inputs from the batch
  std::vector<Packed> actIn;   // forward inputs, from the previous stage
  std::vector<Packed> actOut;  // forward outputs, to the next stage
  std::vector<Packed> gradIn;  // backward seeds, from the next stage
  std::vector<Packed> gradOut; // backward outputs, to the previous stage
  int64_t actOutBytes = 0, gradOutBytes = 0;
  const TensorSlot *loss = nullptr, *lossGrad = nullptr;

  /// A backward input: kept from the forward (an output, or a received
  /// input) at stashOffset, or a data input read again from the batch.
  struct Carried {
    const TensorSlot *input;
    const TensorSlot *source; // in the forward arena; null for data
    int64_t stashOffset;
    bool sourceIsInput;
  };
  std::vector<Carried> carried;
  int64_t stashBytes = 0;
  std::vector<std::vector<char>> stashSlots;
  std::vector<int> freeSlots;
  std::map<int64_t, int> slotOf;

  struct Trained {
    const TensorSlot *param, *grad, *sum;
  };
  std::vector<Trained> trained;
  std::vector<std::pair<Hyper, const TensorSlot *>> hyper;

  // Per step.
  std::map<int64_t, Channel::Message> received, gradReceived;
  std::set<int64_t> restored;
  int64_t backwards = 0;
  double lossSum = 0;
  double busy = 0;
  std::vector<TraceEvent> trace;
  std::vector<StageExecutor::KernelEvent> kernels;
};

TrainingSession::~TrainingSession() = default;

TrainingSession::TrainingSession(const std::string &bundlePath)
    : bundle_(loadBundle(bundlePath)) {
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
  params_ = StageExecutor::takeParameters(bundle_);
  size_t k = bundle_.stages.size();
  for (size_t s = 0; s + 1 < k; ++s) {
    activations.push_back(std::make_unique<Channel>());
    gradients.push_back(std::make_unique<Channel>());
  }
  std::set<std::string> seenInputs;
  for (size_t s = 0; s < k; ++s) {
    auto st = std::make_unique<Stage>();
    Stage &stage = *st;
    stage.index = static_cast<int64_t>(s);
    stage.spec = &bundle_.stages[s];
    stage.stream = &bundle_.schedule.streams.at(s);
    const StageSpec &spec = *stage.spec;
    stage.fwdSpec = spec.phase("forward");
    stage.bwdSpec = spec.phase("backward");
    stage.optSpec = spec.phase("optimizer");
    if (!stage.fwdSpec || !stage.bwdSpec || !stage.optSpec)
      throw fail("a training stage needs forward, backward and optimizer "
                 "phases");
    if (spec.device != "cpu") {
      std::vector<Device> devices = parseDeviceList(spec.device);
      if (devices.size() != 1 || devices[0].kind != DeviceKind::Cpu)
        throw fail("stage " + std::to_string(s) + " is on '" + spec.device +
                   "': this runtime runs stages on CPU devices");
      stage.worker = std::make_unique<DeviceWorker>(devices[0].ids);
    } else if (k > 1) {
      throw fail("a pipeline stage must name its device");
    }
    // oneDNN sizes a primitive's parallel work for the threads of the
    // thread that creates it: the device's own.
    auto load = [&] {
      stage.exec =
          std::make_unique<StageExecutor>(bundle_, spec, params_.get());
    };
    if (stage.worker) {
      stage.worker->start(load);
      stage.worker->wait();
    } else {
      load();
    }
    stage.fwd = stage.exec->phaseIndex("forward");
    stage.bwd = stage.exec->phaseIndex("backward");
    stage.opt = stage.exec->phaseIndex("optimizer");
    const PhaseSpec &fwd = *stage.fwdSpec, &bwd = *stage.bwdSpec;
    bool last = s + 1 == k;
    for (const TensorSlot &in : fwd.inputs) {
      if (startsWith(in.name, "act:")) {
        if (s == 0)
          throw fail("stage 0 has a stage input '" + in.name + "'");
        stage.actIn.push_back({&in, -1}); // offset once the sender is known
      } else {
        stage.dataIn.push_back(&in);
        if (seenInputs.insert(in.name).second)
          dataInputs_.push_back(&in);
      }
    }
    for (const TensorSlot &out : fwd.outputs)
      if (startsWith(out.name, "act:")) {
        stage.actOut.push_back({&out, stage.actOutBytes});
        stage.actOutBytes += out.byteSize();
      }
    for (const TensorSlot &out : bwd.outputs)
      if (startsWith(out.name, "input_grad:")) {
        stage.gradOut.push_back({&out, stage.gradOutBytes});
        stage.gradOutBytes += out.byteSize();
      }
    if (last) {
      stage.loss = fwd.output("loss");
      stage.lossGrad = bwd.input("loss_grad");
      if (!stage.loss || !stage.lossGrad || stage.loss->dtype != DType::F32 ||
          stage.lossGrad->dtype != DType::F32)
        throw fail("the last stage needs a float32 'loss' output and "
                   "'loss_grad' input");
      for (const TensorSlot &o : fwd.outputs)
        if (!modelOutput && o.name != "loss" && !startsWith(o.name, "stash:") &&
            !startsWith(o.name, "act:"))
          modelOutput = &o;
    }
    // What the backward reads: seeds, kept values, received stage inputs
    // (recompute) or data inputs.
    for (const TensorSlot &in : bwd.inputs) {
      if (&in == stage.lossGrad)
        continue;
      if (startsWith(in.name, "output_grad:")) {
        stage.gradIn.push_back({&in, -1});
        continue;
      }
      const TensorSlot *source = fwd.output(in.name);
      bool isInput = false;
      if (!source && startsWith(in.name, "act:")) {
        source = fwd.input(in.name);
        isInput = true;
      }
      if (source) {
        if (source->byteSize() != in.byteSize())
          throw fail("'" + in.name + "' differs between the phases of stage " +
                     std::to_string(s));
        stage.carried.push_back({&in, source, stage.stashBytes, isInput});
        stage.stashBytes += in.byteSize();
      } else if (fwd.input(in.name)) {
        stage.carried.push_back({&in, nullptr, -1, false});
      } else {
        throw fail("the backward input '" + in.name + "' of stage " +
                   std::to_string(s) + " comes from nowhere");
      }
    }
    int64_t slots = std::max<int64_t>(stage.stream->maxAlive, 1);
    for (int64_t i = 0; i < slots; ++i) {
      stage.stashSlots.emplace_back(static_cast<size_t>(stage.stashBytes));
      stage.freeSlots.push_back(static_cast<int>(i));
    }
    const PhaseSpec &opt = *stage.optSpec;
    for (const TensorSlot &p : bundle_.parameters) {
      if (const TensorSlot *g = bwd.output("grad:" + p.name)) {
        const TensorSlot *sum = opt.input("grad:" + p.name);
        if (p.dtype != DType::F32 || g->byteSize() != p.byteSize() || !sum ||
            sum->byteSize() != p.byteSize())
          throw fail("gradient of '" + p.name +
                     "' does not match the parameter");
        stage.trained.push_back({&p, g, sum});
      }
    }
    for (const TensorSlot &in : opt.inputs)
      if (startsWith(in.name, "hyper:")) {
        if (in.dtype != DType::F32 || in.numElements() != 1)
          throw fail("'" + in.name + "' must be a float32 scalar");
        std::string name = in.name.substr(6);
        auto known = std::find_if(
            std::begin(kHyperParameters), std::end(kHyperParameters),
            [&](const auto &h) { return name == h.first; });
        if (known == std::end(kHyperParameters))
          throw fail("the optimizer asks for an unknown hyper-parameter '" +
                     name + "'");
        stage.hyper.push_back({known->second, &in});
      }
    stages.push_back(std::move(st));
  }
  // Message layouts: a receiver finds each input by name in its sender's.
  for (size_t s = 1; s < k; ++s) {
    Stage &prev = *stages[s - 1], &cur = *stages[s];
    for (Packed &p : cur.actIn) {
      for (const Packed &o : prev.actOut)
        if (o.slot->name == p.slot->name &&
            o.slot->byteSize() == p.slot->byteSize()) {
          p.offset = o.offset;
          p.source = o.slot;
        }
      if (p.offset < 0)
        throw fail("stage " + std::to_string(s) + " input '" + p.slot->name +
                   "' is not an output of stage " + std::to_string(s - 1));
    }
    for (Packed &p : prev.gradIn) {
      std::string name = "input_grad:" + p.slot->name.substr(12);
      for (const Packed &o : cur.gradOut)
        if (o.slot->name == name && o.slot->byteSize() == p.slot->byteSize())
          p.offset = o.offset;
      if (p.offset < 0)
        throw fail("stage " + std::to_string(s - 1) + " seed '" + p.slot->name +
                   "' has no gradient from stage " + std::to_string(s));
    }
  }
}

double TrainingSession::step(const std::map<std::string, HostTensor> &batch) {
  int64_t n = batchSize();
  for (const TensorSlot *slot : dataInputs()) {
    auto it = batch.find(slot->name);
    if (it == batch.end())
      throw InputError("training data has no '" + slot->name + "'");
    const HostTensor &t = it->second;
    std::vector<int64_t> expected = slot->shape;
    if (expected.empty() || t.dtype != slot->dtype ||
        t.shape.size() != expected.size() || t.shape[0] != n ||
        !std::equal(expected.begin() + 1, expected.end(), t.shape.begin() + 1))
      throw InputError("training batch '" + slot->name + "' is " +
                       t.describe() + "; each step needs " + std::to_string(n) +
                       " rows of " + dtypeName(slot->dtype) +
                       " with the model's other dimensions");
  }
  if (tracing && traceOrigin == 0)
    traceOrigin = now();
  double start = now();
  for (auto &st : stages) {
    st->backwards = 0;
    st->lossSum = 0;
    st->restored.clear();
  }
  if (stages.size() == 1 && !stages[0]->worker) {
    runStream(*stages[0], batch);
  } else {
    for (auto &st : stages) {
      Stage *stage = st.get();
      stage->worker->start([this, stage, &batch] {
        try {
          runStream(*stage, batch);
        } catch (...) {
          // Wake the stages waiting for this one.
          for (auto &c : activations)
            c->close();
          for (auto &c : gradients)
            c->close();
          throw;
        }
      });
    }
    std::exception_ptr first, any;
    for (auto &st : stages) {
      try {
        st->worker->wait();
      } catch (const ChannelClosed &) {
        any = std::current_exception();
      } catch (...) {
        if (!first)
          first = std::current_exception();
      }
    }
    for (auto &c : activations)
      c->reset();
    for (auto &c : gradients)
      c->reset();
    if (first || any) {
      for (auto &st : stages) {
        for (auto &[mb, slot] : st->slotOf)
          st->freeSlots.push_back(slot);
        st->slotOf.clear();
        st->received.clear();
        st->gradReceived.clear();
      }
      std::rethrow_exception(first ? first : any);
    }
  }
  ++steps;
  ++statSteps;
  ++profileSteps;
  statSeconds += now() - start;
  return stages.back()->lossSum /
         static_cast<double>(bundle_.training.microBatches);
}

void TrainingSession::runStream(
    Stage &stage, const std::map<std::string, HostTensor> &batch) {
  stage.exec->setKernelTrace(tracing ? &stage.kernels : nullptr);
  for (const Instruction &instr : stage.stream->instructions) {
    bool compute = instr.op == Instruction::Op::Forward ||
                   instr.op == Instruction::Op::Backward ||
                   instr.op == Instruction::Op::Recompute ||
                   instr.op == Instruction::Op::OptimizerStep;
    double begin = compute || tracing ? now() : 0;
    runInstruction(stage, instr, batch);
    if (compute || tracing) {
      double end = now();
      if (compute)
        stage.busy += end - begin;
      if (tracing) {
        std::string name = instructionName(instr.op);
        if (instr.microBatch >= 0)
          name += " " + std::to_string(instr.microBatch);
        stage.trace.push_back({std::move(name), begin, end});
      }
    }
  }
}

void TrainingSession::loadStash(
    Stage &stage, int64_t mb, const std::map<std::string, HostTensor> &batch) {
  char *ba = stage.exec->arena(stage.bwd);
  auto slot = stage.slotOf.find(mb);
  if (slot == stage.slotOf.end())
    throw std::runtime_error("stage " + std::to_string(stage.index) +
                             ": backward of micro-batch " + std::to_string(mb) +
                             " without its forward");
  const std::vector<char> &stash = stage.stashSlots[slot->second];
  for (const Stage::Carried &c : stage.carried) {
    const char *from = c.source ? stash.data() + c.stashOffset
                                : reinterpret_cast<const char *>(
                                      batch.at(c.input->name).data.data()) +
                                      mb * c.input->byteSize();
    parallelCopy(ba + c.input->offset, from, c.input->byteSize());
  }
  stage.restored.insert(mb);
}

void TrainingSession::pack(const std::vector<Packed> &slots, int64_t bytes,
                           const char *arena, Channel &channel, int64_t mb) {
  Channel::Message msg = channel.acquire(static_cast<size_t>(bytes));
  for (const Packed &p : slots)
    std::memcpy(msg.data() + p.offset, arena + p.slot->offset,
                p.slot->byteSize());
  channel.send(mb, std::move(msg));
}

void TrainingSession::unpack(Stage &stage,
                             std::map<int64_t, Channel::Message> &received,
                             const std::vector<Packed> &slots, Channel &channel,
                             int64_t mb, char *arena, const char *phase) {
  auto it = received.find(mb);
  if (it == received.end())
    throw std::runtime_error("stage " + std::to_string(stage.index) + ": " +
                             phase + " of micro-batch " + std::to_string(mb) +
                             " before its message");
  for (const Packed &p : slots)
    std::memcpy(arena + p.slot->offset, it->second.data() + p.offset,
                p.slot->byteSize());
  channel.release(std::move(it->second));
  received.erase(it);
}

void TrainingSession::runInstruction(
    Stage &stage, const Instruction &instr,
    const std::map<std::string, HostTensor> &batch) {
  int64_t mb = instr.microBatch, m = bundle_.training.microBatches;
  StageExecutor &exec = *stage.exec;
  switch (instr.op) {
  case Instruction::Op::RecvActivation:
    stage.received[mb] = activations[stage.index - 1]->receive(mb);
    return;
  case Instruction::Op::RecvGradient:
    stage.gradReceived[mb] = gradients[stage.index]->receive(mb);
    return;
  case Instruction::Op::Forward: {
    char *fa = exec.arena(stage.fwd);
    for (const TensorSlot *slot : stage.dataIn)
      parallelCopy(
          fa + slot->offset,
          reinterpret_cast<const char *>(batch.at(slot->name).data.data()) +
              mb * slot->byteSize(),
          slot->byteSize());
    if (!stage.actIn.empty())
      unpack(stage, stage.received, stage.actIn, *activations[stage.index - 1],
             mb, fa, "forward");
    if (stage.freeSlots.empty())
      throw std::runtime_error("stage " + std::to_string(stage.index) +
                               ": more micro-batches alive than the "
                               "schedule allows");
    int slot = stage.freeSlots.back();
    stage.freeSlots.pop_back();
    stage.slotOf[mb] = slot;
    char *stash = stage.stashSlots[slot].data();
    // Kept inputs before the run (the arena reuses their memory), kept
    // outputs after it.
    for (const Stage::Carried &c : stage.carried)
      if (c.source && c.sourceIsInput)
        parallelCopy(stash + c.stashOffset, fa + c.source->offset,
                     c.source->byteSize());
    exec.setRandomState({randomSeed, steps, mb});
    exec.run(stage.fwd);
    if (stage.loss) {
      float microLoss;
      std::memcpy(&microLoss, fa + stage.loss->offset, sizeof(float));
      stage.lossSum += microLoss;
    }
    for (const Stage::Carried &c : stage.carried)
      if (c.source && !c.sourceIsInput)
        parallelCopy(stash + c.stashOffset, fa + c.source->offset,
                     c.source->byteSize());
    return;
  }
  case Instruction::Op::SendActivation:
    pack(stage.actOut, stage.actOutBytes, exec.arena(stage.fwd),
         *activations[stage.index], mb);
    return;
  case Instruction::Op::Recompute:
    // The recomputation is compiled into the backward entry point; here
    // the stage input kept by the forward goes back in place.
    loadStash(stage, mb, batch);
    return;
  case Instruction::Op::Backward: {
    if (!stage.restored.count(mb))
      loadStash(stage, mb, batch);
    stage.restored.erase(mb);
    char *ba = exec.arena(stage.bwd);
    if (stage.lossGrad) {
      float seed = 1.0f / static_cast<float>(m);
      std::memcpy(ba + stage.lossGrad->offset, &seed, sizeof(float));
    }
    if (!stage.gradIn.empty())
      unpack(stage, stage.gradReceived, stage.gradIn, *gradients[stage.index],
             mb, ba, "backward");
    exec.setRandomState({randomSeed, steps, mb});
    exec.run(stage.bwd);
    int slot = stage.slotOf.at(mb);
    stage.slotOf.erase(mb);
    stage.freeSlots.push_back(slot);
    // Gradients accumulate where the optimizer phase reads them (the first
    // backward's are copied there, the others added).
    char *oa = exec.arena(stage.opt);
    bool first = stage.backwards++ == 0;
    for (const Stage::Trained &t : stage.trained) {
      if (first) {
        parallelCopy(oa + t.sum->offset, ba + t.grad->offset,
                     t.sum->byteSize());
        continue;
      }
      parallelAccumulate(reinterpret_cast<float *>(oa + t.sum->offset),
                         reinterpret_cast<const float *>(ba + t.grad->offset),
                         t.param->numElements());
    }
    return;
  }
  case Instruction::Op::SendGradient:
    pack(stage.gradOut, stage.gradOutBytes, exec.arena(stage.bwd),
         *gradients[stage.index - 1], mb);
    return;
  case Instruction::Op::OptimizerStep:
    if (stage.backwards != m)
      throw std::runtime_error("stage " + std::to_string(stage.index) +
                               ": optimizer step after " +
                               std::to_string(stage.backwards) + " of " +
                               std::to_string(m) + " backwards");
    optimizerStep(stage);
    return;
  }
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
  for (auto &st : stages)
    used |= std::any_of(st->hyper.begin(), st->hyper.end(), [&](const auto &h) {
      return kHyperParameters[static_cast<int>(h.first)].first == name;
    });
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

void TrainingSession::optimizerStep(Stage &stage) {
  // The update itself is compiled into the stage (gpipe-append-optimizer);
  // the runtime sets this step's hyper-parameters.
  const TrainingSpec &t = bundle_.training;
  double step = static_cast<double>(steps + 1);
  char *oa = stage.exec->arena(stage.opt);
  for (auto &[kind, slot] : stage.hyper) {
    double value = 0;
    switch (kind) {
    case Hyper::LR:
      value = lr_;
      break;
    case Hyper::WeightDecay:
      value = t.weightDecay;
      break;
    case Hyper::Momentum:
      value = t.momentum;
      break;
    case Hyper::Beta1:
      value = t.beta1;
      break;
    case Hyper::Beta2:
      value = t.beta2;
      break;
    case Hyper::Eps:
      value = t.eps;
      break;
    case Hyper::StepSize:
      value = lr_ / (1 - std::pow(t.beta1, step));
      break;
    case Hyper::BiasCorrection2:
      value = std::sqrt(1 - std::pow(t.beta2, step));
      break;
    }
    float v = static_cast<float>(value);
    std::memcpy(oa + slot->offset, &v, sizeof(float));
  }
  stage.exec->run(stage.opt);
}

HostTensor
TrainingSession::evaluate(const std::map<std::string, HostTensor> &microBatch) {
  if (!modelOutput)
    throw InputError("the model has no output besides its loss");
  // The stages' forwards one after the other on this thread, each reading
  // its stage inputs straight from the previous stage's arena.
  struct Restore {
    std::vector<std::unique_ptr<Stage>> &stages;
    ~Restore() {
      for (auto &st : stages)
        st->exec->setUpdateState(true);
    }
  } restore{stages};
  for (size_t s = 0; s < stages.size(); ++s) {
    Stage &stage = *stages[s];
    char *arena = stage.exec->arena(stage.fwd);
    for (const TensorSlot *slot : stage.dataIn) {
      auto it = microBatch.find(slot->name);
      if (it == microBatch.end() ||
          static_cast<int64_t>(it->second.data.size()) != slot->byteSize())
        throw InputError("evaluation batch '" + slot->name +
                         "' must have the compiled micro-batch shape " +
                         std::to_string(slot->byteSize()) + " bytes");
      std::memcpy(arena + slot->offset, it->second.data.data(),
                  slot->byteSize());
    }
    if (s > 0) {
      Stage &prev = *stages[s - 1];
      const char *from = prev.exec->arena(prev.fwd);
      for (const Packed &p : stage.actIn)
        std::memcpy(arena + p.slot->offset, from + p.source->offset,
                    p.slot->byteSize());
    }
    stage.exec->setUpdateState(false);
    stage.exec->run(stage.fwd);
  }
  HostTensor out;
  out.dtype = modelOutput->dtype;
  out.shape = modelOutput->shape;
  out.data.resize(modelOutput->byteSize());
  Stage &last = *stages.back();
  std::memcpy(out.data.data(), last.exec->arena(last.fwd) + modelOutput->offset,
              modelOutput->byteSize());
  return out;
}

std::map<std::string, HostTensor> TrainingSession::parameters() const {
  std::map<std::string, HostTensor> out;
  for (const TensorSlot *p : modelState()) {
    if (p->name.rfind("__", 0) == 0)
      continue; // optimizer state
    HostTensor t;
    t.dtype = p->dtype;
    t.shape = p->shape;
    t.data.resize(p->byteSize());
    std::memcpy(t.data.data(), params_.get() + p->offset, p->byteSize());
    out[p->name] = std::move(t);
  }
  return out;
}

void TrainingSession::enableOpProfile() {
  for (auto &st : stages)
    st->exec->setKernelProfile(true);
  profileSteps = 0;
}

std::map<std::string, std::pair<double, double>>
TrainingSession::opProfile() const {
  std::map<std::string, std::pair<double, double>> out;
  double runs = static_cast<double>(profileSteps) *
                static_cast<double>(bundle_.training.microBatches);
  if (runs == 0)
    return out;
  for (const auto &st : stages) {
    const auto &totals = st->exec->kernelSeconds();
    for (size_t phase : {st->fwd, st->bwd}) {
      if (phase >= totals.size())
        continue;
      const std::vector<KernelSpec> &kernels = st->spec->phases[phase].kernels;
      for (size_t k = 0; k < kernels.size() && k < totals[phase].size(); ++k) {
        if (kernels[k].op.empty())
          continue;
        auto &entry = out[kernels[k].op];
        (phase == st->fwd ? entry.first : entry.second) +=
            totals[phase][k] / runs;
      }
    }
  }
  return out;
}

double TrainingSession::Stats::bubble() const {
  if (stepSeconds <= 0 || stages.empty())
    return 0;
  double busy = 0;
  for (const StageStats &s : stages)
    busy += s.busySeconds;
  return 1 - busy / (stepSeconds * static_cast<double>(stages.size()));
}

TrainingSession::Stats TrainingSession::stats() const {
  Stats out;
  out.steps = statSteps;
  out.stepSeconds = statSeconds;
  out.predictedStepSeconds = bundle_.schedule.predictedStepSeconds;
  out.predictedBubble = bundle_.schedule.predictedBubble;
  for (const auto &st : stages) {
    StageStats s;
    s.device = st->spec->device;
    s.busySeconds = st->busy;
    s.allocatedBytes =
        st->exec->allocatedBytes() +
        st->stashBytes * static_cast<int64_t>(st->stashSlots.size());
    s.predictedPeakBytes = st->stream->predictedPeakBytes;
    out.stages.push_back(s);
  }
  return out;
}

void TrainingSession::writeTrace(const std::string &path) const {
  nlohmann::json events = nlohmann::json::array();
  auto us = [&](double t) { return (t - traceOrigin) * 1e6; };
  for (const auto &st : stages) {
    int64_t tid = st->index;
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", tid},
                      {"args",
                       {{"name", "stage " + std::to_string(tid) + " on " +
                                     st->spec->device}}}});
    for (const TraceEvent &e : st->trace)
      events.push_back({{"name", e.name},
                        {"cat", "instruction"},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", tid},
                        {"ts", us(e.begin)},
                        {"dur", (e.end - e.begin) * 1e6}});
    for (const StageExecutor::KernelEvent &e : st->kernels)
      events.push_back({{"name", *e.kind},
                        {"cat", "kernel"},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", tid},
                        {"ts", us(e.begin)},
                        {"dur", (e.end - e.begin) * 1e6}});
  }
  nlohmann::json trace{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  writeFileAtomically(path, trace.dump());
}

std::vector<const TensorSlot *> TrainingSession::modelState() const {
  // Every tensor that changes: trained, updated by its op (BatchNorm's
  // running statistics) or optimizer state (`__opt.*`); not the constants
  // the compiler moved into the blob.
  std::vector<const TensorSlot *> out;
  for (const TensorSlot &p : bundle_.parameters)
    if (p.name.rfind("__constant_", 0) != 0)
      out.push_back(&p);
  return out;
}

} // namespace gpipe::runtime

namespace gpipe::runtime {

namespace {
constexpr char kCheckpointMagic[8] = {'G', 'P', 'C', 'K', 'P', 'T', '0', '3'};

template <typename T> void put(std::string &out, const T &v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}
} // namespace

void TrainingSession::saveCheckpoint(const std::string &path,
                                     uint64_t extra) const {
  std::string out(kCheckpointMagic, sizeof(kCheckpointMagic));
  put<uint32_t>(out, bundle_.paramsCrc32);
  put<int64_t>(out, steps);
  put<uint64_t>(out, extra);
  std::vector<const TensorSlot *> state = modelState();
  put<uint64_t>(out, state.size());
  for (const TensorSlot *p : state) {
    put<uint64_t>(out, p->byteSize());
    out.append(params_.get() + p->offset, p->byteSize());
  }
  put<uint32_t>(out, crc32Of(out.data(), out.size()));
  writeFileAtomically(path, out);
}

uint64_t TrainingSession::loadCheckpoint(const std::string &path) {
  std::optional<std::string> file = readFileBytes(path);
  if (!file)
    throw BundleError(path + ": cannot open the checkpoint");
  std::string &in = *file;
  size_t at = 0;
  auto fail = [&](const std::string &why) -> BundleError {
    return BundleError(path + ": " + why);
  };
  auto take = [&](size_t n) {
    if (n > in.size() - at)
      throw fail("truncated checkpoint");
    const char *p = in.data() + at;
    at += n;
    return p;
  };
  auto get = [&](auto &v) { std::memcpy(&v, take(sizeof(v)), sizeof(v)); };
  if (in.size() < sizeof(kCheckpointMagic) + 4 ||
      std::memcmp(in.data(), kCheckpointMagic, 6) != 0)
    throw fail("not a gpipe checkpoint");
  if (std::memcmp(in.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0)
    throw fail("checkpoint format " + in.substr(6, 2) +
               " of another gpipe version; this one reads format " +
               std::string(kCheckpointMagic + 6, 2) +
               " (train again without --resume)");
  uint32_t stored;
  std::memcpy(&stored, in.data() + in.size() - 4, 4);
  if (crc32Of(in.data(), in.size() - 4) != stored)
    throw fail("checksum mismatch (the checkpoint is corrupt)");
  in.resize(in.size() - 4);
  take(sizeof(kCheckpointMagic));
  uint32_t model;
  int64_t stepCount;
  uint64_t extra, count;
  get(model);
  get(stepCount);
  get(extra);
  get(count);
  std::vector<const TensorSlot *> state = modelState();
  auto otherModel = [&] {
    return fail("the checkpoint belongs to another model or bundle");
  };
  if (model != bundle_.paramsCrc32 || count != state.size())
    throw otherModel();
  for (const TensorSlot *p : state) {
    uint64_t bytes;
    get(bytes);
    if (bytes != static_cast<uint64_t>(p->byteSize()))
      throw otherModel();
    std::memcpy(params_.get() + p->offset, take(bytes), bytes);
  }

  steps = stepCount;
  return extra;
}

} // namespace gpipe::runtime
