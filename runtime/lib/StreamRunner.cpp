#include "StreamRunner.h"

#include "Clock.h"
#include "MessagePacking.h"

#include "gpipe/runtime/InferenceSession.h"

#include <algorithm>
#include <cstring>

namespace gpipe::runtime {

namespace {

const char *bytesOf(const HostTensor &t) {
  return reinterpret_cast<const char *>(t.data.data());
}

// The runtime's parts as trace events: a kernel event of no op whose
// phase is "runtime" (TrainingSession::writeTrace).
const std::string kNoOp, kRuntime = "runtime", kStashCopies = "stash copies",
                         kDataInputs = "data inputs", kMessages = "messages",
                         kGradientSums = "gradient sums",
                         kGradientExchange = "gradient exchange";
} // namespace

StreamRunner::Part::Part(StreamRunner &runner, double &field,
                         const std::string *name)
    : runner(runner), field(field), name(name),
      timed(runner.profiling || (runner.tracing && name)) {
  if (timed)
    begin = steadySeconds();
}

StreamRunner::Part::~Part() {
  if (!timed)
    return;
  double end = steadySeconds();
  if (runner.profiling)
    field += end - begin;
  if (runner.tracing && name)
    runner.kernels.push_back({&kNoOp, name, &kRuntime, begin, end});
}

StreamRunner::StreamRunner(const StageSpec &spec, const StreamSpec &stream,
                           std::unique_ptr<StageExecutor> executor,
                           Transport &transport, Reducer *reducer)
    : spec_(spec), stream(stream), exec(std::move(executor)),
      transport(transport), wiring(spec.wiring),
      fwd(exec->phaseIndex("forward")),
      bwd(exec->phaseIndex(spec.backwardRole())),
      opt(exec->phaseIndex("optimizer")), fwdSpec(&spec.phases[fwd]),
      bwdSpec(&spec.phases[bwd]), optSpec(&spec.phases[opt]), reducer(reducer) {
  if (spec.phase("backward_weight")) {
    wgt = exec->phaseIndex("backward_weight");
    wgtSpec = &spec.phases[wgt];
  }
  // The schedule runs the backwards as the stage's code has them: whole,
  // or in two parts.
  for (const Instruction &instr : stream.instructions) {
    using Op = Instruction::Op;
    bool split =
        instr.op == Op::BackwardInput || instr.op == Op::BackwardWeight;
    if ((split && !wgtSpec) || (instr.op == Op::Backward && wgtSpec))
      throw BundleError(
          "stage " + std::to_string(spec.index) + ": the schedule runs " +
          (split ? "split backwards, but the stage's code has one whole"
                 : "whole backwards, but the stage's code has them in two "
                   "parts") +
          " (the bundle's schedule and stages disagree: compile it again)");
  }
  for (const TensorSlot &in : fwdSpec->inputs)
    if (in.role == Role::Data)
      dataIn.push_back(&in);
  // A gradient that one product writes and nothing else of its phase
  // reads (the compiler's "written_by") is summed by that product where
  // the optimizer reads it: the sum's traffic of the stage's weights (two
  // reads and a write every micro-batch, 15% of a balanced MLP's step at
  // 16 micro-batches of 16 rows) becomes one read inside the product.
  size_t gradientPhase = wgtSpec ? wgt : bwd;
  const PhaseSpec &gradients = spec.phases[gradientPhase];
  summedByKernel.assign(wiring.trained.size(), false);
  for (size_t i = 0; i < wiring.trained.size(); ++i) {
    const WiringSpec::Trained &t = wiring.trained[i];
    const TensorSlot &grad = gradients.outputs[t.gradient];
    const TensorSlot &sum = optSpec->inputs[t.sum];
    if (grad.writtenBy < 0 || grad.dtype != DType::F32 ||
        sum.dtype != DType::F32 || grad.byteSize() != sum.byteSize())
      continue;
    auto writes = [&](const KernelSpec &k) {
      return std::any_of(
          k.results.begin(), k.results.end(), [&](const TensorSlot &r) {
            return r.space == grad.space && r.offset == grad.offset &&
                   r.byteSize() == grad.byteSize();
          });
    };
    if (grad.writtenBy >= static_cast<int64_t>(gradients.kernels.size()) ||
        !writes(gradients.kernels[grad.writtenBy]))
      throw BundleError("stage " + std::to_string(spec.index) + ": gradient '" +
                        grad.name + "' is written by kernel " +
                        std::to_string(grad.writtenBy) +
                        ", which does not write it (a damaged manifest)");
    summedByKernel[i] = exec->retarget(gradientPhase, grad.writtenBy,
                                       exec->arena(opt) + sum.offset);
  }
  // A forward whose micro-batch's backward (or recompute) is the next
  // compute instruction hands what it keeps straight to that backward: in
  // the arena the two phases share it stays where the forward left it (no
  // copy), else it goes into the backward's arena (one copy, not two).
  // Messages are filled when their forward or backward ends, so the sends
  // and receives in between read no arena. The compiler prices the same
  // rule (StreamOp::directlyCarriedMicroBatches).
  // A split backward's parts have arenas of their own, and the weight
  // part reads the stash too: every micro-batch goes through the stash.
  int64_t pending = -1; // the last forward's micro-batch, or -1
  for (const Instruction &instr : stream.instructions) {
    using Op = Instruction::Op;
    if (wgtSpec)
      break; // none carried directly
    if (instr.op == Op::Forward) {
      pending = instr.microBatch;
    } else if (instr.op == Op::Backward || instr.op == Op::Recompute) {
      if (pending >= 0 && pending == instr.microBatch)
        directlyCarried.insert(instr.microBatch);
      pending = -1;
    }
  }
  for (const Instruction &instr : stream.instructions)
    if (instr.op == Instruction::Op::SendActivation)
      sendKeys[{MessageKind::Activation, instr.microBatch}] =
          transferKey(instr);
    else if (instr.op == Instruction::Op::SendGradient)
      sendKeys[{MessageKind::Gradient, instr.microBatch}] = transferKey(instr);
  // A stash slot for each micro-batch kept at once that is not carried
  // directly (StreamOp::maxStashedMicroBatches).
  int64_t slots = 0, stashed = 0;
  for (const Instruction &instr : stream.instructions) {
    using Op = Instruction::Op;
    if (directlyCarried.count(instr.microBatch))
      continue;
    if (instr.op == Op::Forward)
      slots = std::max(slots, ++stashed);
    else if (instr.op == Op::Backward || instr.op == Op::BackwardWeight)
      --stashed;
  }
  for (int64_t i = 0; i < slots; ++i) {
    stashSlots.push_back(exec->device().allocate(wiring.stashBytes));
    freeSlots.push_back(static_cast<int>(i));
  }
  if (reducer) {
    // Buckets of about kBucketBytes in the order of the trained tensors (a
    // larger tensor is a bucket of its own): several sums in flight.
    constexpr int64_t kBucketBytes = 4 << 20;
    int64_t filled = kBucketBytes;
    for (size_t i = 0; i < wiring.trained.size(); ++i) {
      int64_t bytes = optSpec->inputs[wiring.trained[i].sum].byteSize();
      if (filled + bytes > kBucketBytes) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().trained.push_back(i);
      filled += bytes;
    }
    for (const TensorSlot &p : spec_.parameters.tensors)
      if (p.kind == ParamKind::Buffer && p.dtype == DType::F32)
        replicaStats.emplace_back(
            &p, std::vector<float>(static_cast<size_t>(p.numElements())));
    for (Bucket &b : buckets) {
      int64_t n = 0;
      for (size_t i : b.trained)
        n += optSpec->inputs[wiring.trained[i].sum].numElements();
      b.data.resize(static_cast<size_t>(n));
    }
  }
}

MessageKey StreamRunner::key(MessageKind kind, int64_t peer, int64_t mb,
                             bool sending) const {
  MessageKey k;
  k.kind = kind;
  k.microBatch = mb;
  k.from = sending ? spec_.index : peer;
  k.to = sending ? peer : spec_.index;
  return k;
}

MessageKey StreamRunner::transferKey(const Instruction &instr) const {
  using Op = Instruction::Op;
  bool activation =
      instr.op == Op::SendActivation || instr.op == Op::RecvActivation;
  bool sending = isSend(instr.op);
  return key(activation ? MessageKind::Activation : MessageKind::Gradient,
             instr.peer, instr.microBatch, sending);
}

void StreamRunner::runStep(const StepContext &context) {
  Part whole(*this, breakdown_.steps);
  backwards = 0;
  lossSum_ = 0;
  restored.clear();
  exec->setKernelTrace(tracing ? &kernels : nullptr);
  // Every receive of the step is posted before the first instruction runs.
  for (const Instruction &instr : stream.instructions)
    if (instr.op == Instruction::Op::RecvActivation)
      transport.postReceive(transferKey(instr), wiring.recvActivations.bytes);
    else if (instr.op == Instruction::Op::RecvGradient)
      transport.postReceive(transferKey(instr), wiring.recvGradients.bytes);
  // Whether this stream holds its device's turn: from a compute
  // instruction's start through the sends right after it.
  bool holding = false;
  const std::vector<Instruction> &instrs = stream.instructions;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instruction &instr = instrs[i];
    bool compute = !isTransfer(instr.op);
    // On a device other stages share: its turn in the device's order.
    bool turn = deviceTurn && instr.turn >= 0;
    if (turn) {
      Part wait(*this, breakdown_.turnWaits);
      deviceTurn->acquire(instr.turn);
    }
    double begin = compute || tracing ? steadySeconds() : 0;
    run(instr, context);
    if (compute || tracing) {
      double end = steadySeconds();
      if (compute) {
        busy += end - begin;
        if (instr.op == Instruction::Op::OptimizerStep)
          optimizerBusy += end - begin;
      }
      if (tracing) {
        using Op = Instruction::Op;
        int64_t bytes = 0;
        if (instr.op == Op::SendActivation || instr.op == Op::RecvActivation)
          bytes = instr.op == Op::SendActivation ? wiring.sendActivations.bytes
                                                 : wiring.recvActivations.bytes;
        else if (instr.op == Op::SendGradient || instr.op == Op::RecvGradient)
          bytes = instr.op == Op::SendGradient ? wiring.sendGradients.bytes
                                               : wiring.recvGradients.bytes;
        traceEvents.push_back({instr, tracedSteps, bytes, begin, end});
      }
    }
    // The turn passes on after the clock is read and after the sends that
    // follow (they never wait): the next stage on the device may take the
    // core at once, and the operating system lets the thread it wakes run
    // first, for as long as that stage computes, so a send left for after
    // the hand-off would reach its peer that much later (GPT 2x128,
    // interleaved 1F1B on two cores: a gradient sent 1.77 ms after its
    // backward, four of the other stage's instructions later, while the
    // stage it was for waited idle on the other core).
    holding = holding || turn;
    bool sendNext = i + 1 < instrs.size() && isSend(instrs[i + 1].op);
    if (holding && !sendNext) {
      deviceTurn->release();
      holding = false;
    }
  }
  if (tracing)
    ++tracedSteps;
}

void StreamRunner::startReplicaSums() {
  sumStart = steadySeconds();
  const char *oa = exec->arena(opt);
  for (Bucket &b : buckets) {
    float *at = b.data.data();
    for (size_t i : b.trained) {
      const TensorSlot &sum = optSpec->inputs[wiring.trained[i].sum];
      exec->device().copyToHost(at, oa + sum.offset, sum.byteSize());
      at += sum.numElements();
    }
    reducer->start(b.data.data(), b.data.size());
  }
}

void StreamRunner::finishReplicaSums(const StepContext &context) {
  // Started by the last backward (optimizerStep checked there was one).
  double waitBegin = steadySeconds();
  reducer->waitAll();
  double waitEnd = steadySeconds();
  sumWait += waitEnd - waitBegin;
  sumSpan += waitEnd - sumStart;
  char *oa = exec->arena(opt);
  for (Bucket &b : buckets) {
    const float *at = b.data.data();
    for (size_t i : b.trained) {
      const TensorSlot &sum = optSpec->inputs[wiring.trained[i].sum];
      exec->device().copyToDevice(oa + sum.offset, at, sum.byteSize());
      at += sum.numElements();
    }
  }
  // Running statistics: the mean over the replicas (each replica updated
  // its own from its micro-batches).
  if (replicaStats.empty())
    return;
  for (auto &[slot, values] : replicaStats) {
    exec->readParameter(*slot, values.data());
    reducer->start(values.data(), values.size());
  }
  reducer->waitAll();
  float scale = 1.0f / static_cast<float>(context.replicas);
  for (auto &[slot, values] : replicaStats) {
    for (float &x : values)
      x *= scale;
    exec->writeParameter(*slot, values.data());
  }
}

void StreamRunner::clearStep() {
  for (auto &[mb, slot] : slotOf)
    freeSlots.push_back(slot);
  slotOf.clear();
  received.clear();
  gradReceived.clear();
  outgoing.clear();
}

Transport::Message StreamRunner::fill(const MessageLayout &layout,
                                      const PhaseSpec &phase, const char *arena,
                                      const MessageKey &k) {
  Transport::Message msg =
      transport.acquire(k, static_cast<size_t>(layout.bytes));
  packMessage(exec->device(), layout, phase.outputs, arena, msg.data());
  return msg;
}

void StreamRunner::send(const MessageLayout &layout, const PhaseSpec &phase,
                        const char *arena, const MessageKey &k) {
  transport.postSend(k, fill(layout, phase, arena, k));
}

void StreamRunner::fillOutgoing(MessageKind kind, int64_t mb) {
  bool activation = kind == MessageKind::Activation;
  const MessageLayout &layout =
      activation ? wiring.sendActivations : wiring.sendGradients;
  auto k = sendKeys.find({kind, mb});
  if (layout.tensors.empty() || k == sendKeys.end())
    return;
  Part messages(*this, breakdown_.messages[activation ? 0 : 1], &kMessages);
  outgoing[{kind, mb}] = fill(layout, activation ? *fwdSpec : *bwdSpec,
                              exec->arena(activation ? fwd : bwd), k->second);
}

void StreamRunner::postOutgoing(const Instruction &instr) {
  MessageKey k = transferKey(instr);
  auto it = outgoing.find({k.kind, k.microBatch});
  if (it == outgoing.end())
    throw std::runtime_error("stage " + std::to_string(spec_.index) +
                             ": sends " + k.str() + " before computing it");
  transport.postSend(k, std::move(it->second));
  outgoing.erase(it);
}

void StreamRunner::receive(const MessageLayout &layout, const PhaseSpec &phase,
                           char *arena, const MessageKey &k, const char *what) {
  auto &messages = receivedOf(k.kind);
  auto it = messages.find(k.microBatch);
  if (it == messages.end())
    throw std::runtime_error("stage " + std::to_string(spec_.index) + ": " +
                             what + " of micro-batch " +
                             std::to_string(k.microBatch) +
                             " before its message");
  unpackMessage(exec->device(), layout, phase.inputs, it->second.data(), arena);
  transport.release(k, std::move(it->second));
  messages.erase(it);
}

void StreamRunner::loadStash(int64_t mb, const StepContext &context) {
  char *ba = exec->arena(bwd);
  auto slot = slotOf.find(mb);
  if (slot == slotOf.end())
    throw std::runtime_error("stage " + std::to_string(spec_.index) +
                             ": backward of micro-batch " + std::to_string(mb) +
                             " without its forward");
  const char *stash = stashSlots[slot->second].get();
  DeviceBackend &device = exec->device();
  for (const WiringSpec::Carried &c : wiring.carried) {
    const TensorSlot &in = bwdSpec->inputs[c.input];
    if (c.from == WiringSpec::Carried::From::Batch)
      loadFromBatch(c, mb, context);
    else if (c.bf16)
      device.widenBf16(ba + in.offset, stash + c.stashOffset, in.numElements());
    else
      device.copyOnDevice(ba + in.offset, stash + c.stashOffset, in.byteSize());
  }
  restored.insert(mb);
}

void StreamRunner::loadFromBatch(const WiringSpec::Carried &c, int64_t mb,
                                 const StepContext &context) {
  loadFromBatch(bwd, bwdSpec->inputs[c.input], c.index, mb, context);
}

void StreamRunner::loadFromBatch(size_t phase, const TensorSlot &in,
                                 size_t forwardInput, int64_t mb,
                                 const StepContext &context) {
  exec->device().copyToDevice(
      exec->arena(phase) + in.offset,
      bytesOf(context.batch->at(fwdSpec->inputs[forwardInput].name)) +
          mb * in.byteSize(),
      in.byteSize());
}

void StreamRunner::forward(int64_t mb, const StepContext &context) {
  char *fa = exec->arena(fwd);
  DeviceBackend &device = exec->device();
  {
    Part inputs(*this, breakdown_.dataInputs[0], &kDataInputs);
    for (const TensorSlot *slot : dataIn)
      exec->write(fwd, *slot,
                  bytesOf(context.batch->at(slot->name)) +
                      mb * slot->byteSize());
  }
  if (!wiring.recvActivations.tensors.empty()) {
    Part messages(*this, breakdown_.messages[0], &kMessages);
    receive(wiring.recvActivations, *fwdSpec, fa,
            key(MessageKind::Activation, spec_.index - 1, mb, false),
            "forward");
  }
  bool direct = directlyCarried.count(mb) > 0;
  char *ba = exec->arena(bwd), *stash = nullptr;
  if (!direct) {
    if (freeSlots.empty())
      throw std::runtime_error("stage " + std::to_string(spec_.index) +
                               ": more micro-batches alive than the "
                               "schedule allows");
    int slot = freeSlots.back();
    freeSlots.pop_back();
    slotOf[mb] = slot;
    stash = stashSlots[slot].get();
  }
  // Where a kept value goes: the stash (rounded to bfloat16 where the
  // wiring says so), or its backward input (in an arena the phases share:
  // where it is, no copy; unrounded: the backward's products round it).
  auto keep = [&](const WiringSpec::Carried &c, const TensorSlot &source) {
    const char *from = fa + source.offset;
    char *to =
        direct ? ba + bwdSpec->inputs[c.input].offset : stash + c.stashOffset;
    if (!direct && c.bf16)
      device.roundToBf16(to, from, source.numElements());
    else if (to != from)
      device.copyOnDevice(to, from, source.byteSize());
  };
  using From = WiringSpec::Carried::From;
  // Kept inputs before the run (the arena reuses their memory), kept
  // outputs after it.
  {
    Part stashing(*this, breakdown_.stash[0], &kStashCopies);
    for (const WiringSpec::Carried &c : wiring.carried)
      if (c.from == From::ForwardInput)
        keep(c, fwdSpec->inputs[c.index]);
  }
  exec->setRandomState({context.seed, context.step, mb});
  {
    Part code(*this, breakdown_.phaseRuns[0]);
    exec->run(fwd);
  }
  if (wiring.loss >= 0) {
    float microLoss;
    exec->read(fwd, fwdSpec->outputs[wiring.loss], &microLoss);
    lossSum_ += microLoss;
  }
  {
    Part stashing(*this, breakdown_.stash[0], &kStashCopies);
    for (const WiringSpec::Carried &c : wiring.carried)
      if (c.from == From::ForwardOutput)
        keep(c, fwdSpec->outputs[c.index]);
  }
  // The message before anything of the backward's goes into the arena.
  fillOutgoing(MessageKind::Activation, mb);
  if (direct) {
    Part stashing(*this, breakdown_.stash[0], &kStashCopies);
    for (const WiringSpec::Carried &c : wiring.carried)
      if (c.from == From::Batch)
        loadFromBatch(c, mb, context);
    restored.insert(mb);
  }
}

void StreamRunner::writeLossSeed(size_t phase, const TensorSlot &slot,
                                 const StepContext &context) {
  // The mean over the global batch: M micro-batches on each replica.
  float seed =
      1.0f / static_cast<float>(context.microBatches * context.replicas);
  exec->write(phase, slot, &seed);
}

void StreamRunner::backward(int64_t mb, const StepContext &context) {
  bool split = wgtSpec != nullptr;
  if (!restored.count(mb)) {
    Part stashing(*this, breakdown_.stash[1], &kStashCopies);
    loadStash(mb, context);
  }
  restored.erase(mb);
  char *ba = exec->arena(bwd);
  if (wiring.lossGrad >= 0) {
    Part inputs(*this, breakdown_.dataInputs[1], &kDataInputs);
    writeLossSeed(bwd, bwdSpec->inputs[wiring.lossGrad], context);
  }
  if (!wiring.recvGradients.tensors.empty()) {
    Part messages(*this, breakdown_.messages[1], &kMessages);
    receive(wiring.recvGradients, *bwdSpec, ba,
            key(MessageKind::Gradient, spec_.index + 1, mb, false), "backward");
  }
  // What a split backward's weight part reads of its input part's inputs
  // (a received gradient: before the run, which may reuse their memory)
  // and outputs (after it) joins the micro-batch's stash.
  auto keep = [&](bool outputs) {
    Part stashing(*this, breakdown_.stash[1], &kStashCopies);
    char *stash = stashSlots[slotOf.at(mb)].get();
    for (const WiringSpec::WeightInput &w : wiring.weightInputs)
      if (w.from == WiringSpec::WeightInput::From::Kept &&
          w.fromOutput == outputs) {
        const TensorSlot &source =
            outputs ? bwdSpec->outputs[w.index] : bwdSpec->inputs[w.index];
        exec->device().copyOnDevice(stash + w.stashOffset, ba + source.offset,
                                    source.byteSize());
      }
  };
  if (split)
    keep(/*outputs=*/false);
  exec->setRandomState({context.seed, context.step, mb});
  if (!split)
    exec->setTargetAccumulates(bwd, backwards > 0);
  {
    Part code(*this, breakdown_.phaseRuns[1]);
    exec->run(bwd);
  }
  if (split) {
    keep(/*outputs=*/true);
    fillOutgoing(MessageKind::Gradient, mb);
    return;
  }
  if (auto slot = slotOf.find(mb); slot != slotOf.end()) {
    freeSlots.push_back(slot->second);
    slotOf.erase(slot);
  }
  fillOutgoing(MessageKind::Gradient, mb);
  sumGradients(bwd, context);
}

void StreamRunner::backwardWeight(int64_t mb, const StepContext &context) {
  auto slot = slotOf.find(mb);
  if (slot == slotOf.end())
    throw std::runtime_error("stage " + std::to_string(spec_.index) +
                             ": weight gradients of micro-batch " +
                             std::to_string(mb) + " without its backward");
  char *wa = exec->arena(wgt);
  const char *stash = stashSlots[slot->second].get();
  DeviceBackend &device = exec->device();
  {
    Part stashing(*this, breakdown_.stash[1], &kStashCopies);
    for (const WiringSpec::WeightInput &w : wiring.weightInputs) {
      const TensorSlot &in = wgtSpec->inputs[w.input];
      using From = WiringSpec::WeightInput::From;
      switch (w.from) {
      case From::Kept:
      case From::Stash:
        if (w.bf16)
          device.widenBf16(wa + in.offset, stash + w.stashOffset,
                           in.numElements());
        else
          device.copyOnDevice(wa + in.offset, stash + w.stashOffset,
                              in.byteSize());
        break;
      case From::Batch:
        loadFromBatch(wgt, in, w.index, mb, context);
        break;
      case From::LossSeed:
        writeLossSeed(wgt, in, context);
        break;
      }
    }
  }
  exec->setRandomState({context.seed, context.step, mb});
  exec->setTargetAccumulates(wgt, backwards > 0);
  {
    Part code(*this, breakdown_.phaseRuns[1]);
    exec->run(wgt);
  }
  freeSlots.push_back(slot->second);
  slotOf.erase(slot);
  sumGradients(wgt, context);
}

void StreamRunner::sumGradients(size_t phase, const StepContext &context) {
  Part sums(*this, breakdown_.gradientSums, &kGradientSums);
  // Gradients accumulate where the optimizer phase reads them (the first
  // backward's are copied there, the others added), but for those their
  // products summed there themselves (summedByKernel).
  const PhaseSpec &spec = spec_.phases[phase];
  const char *ga = exec->arena(phase);
  char *oa = exec->arena(opt);
  bool first = backwards++ == 0;
  for (size_t i = 0; i < wiring.trained.size(); ++i) {
    if (summedByKernel[i])
      continue; // its product summed it
    const WiringSpec::Trained &t = wiring.trained[i];
    const TensorSlot &sum = optSpec->inputs[t.sum];
    const TensorSlot &grad = spec.outputs[t.gradient];
    if (first) {
      exec->device().copyOnDevice(oa + sum.offset, ga + grad.offset,
                                  sum.byteSize());
      continue;
    }
    exec->device().accumulate(reinterpret_cast<float *>(oa + sum.offset),
                              reinterpret_cast<const float *>(ga + grad.offset),
                              sum.numElements());
  }
  // The stage's gradients are complete: their sums over the replicas run
  // while the earlier stages finish their backwards.
  if (reducer && backwards == context.microBatches)
    startReplicaSums();
}

void StreamRunner::sumTiedGradients() {
  char *oa = exec->arena(opt);
  int64_t self = spec_.index;
  auto tiedKey = [](int64_t from, int64_t to, int64_t tie) {
    return MessageKey{from, to, MessageKind::TiedGradient, tie};
  };
  // Every receive is posted before any send, every send before any wait.
  for (const WiringSpec::Trained &t : wiring.trained)
    for (int64_t peer : t.tiedStages)
      if (peer != self)
        transport.postReceive(tiedKey(peer, self, t.tie),
                              optSpec->inputs[t.sum].byteSize());
  // Memory: the own gradient on the host (then the sum) and one message to
  // each other copy, as the compiler's prediction counts.
  for (const WiringSpec::Trained &t : wiring.trained) {
    if (t.tiedStages.empty())
      continue;
    const TensorSlot &sum = optSpec->inputs[t.sum];
    size_t n = static_cast<size_t>(sum.numElements());
    std::vector<float> &own = tiedSums[t.tie];
    own.resize(n);
    exec->device().copyToHost(own.data(), oa + sum.offset, sum.byteSize());
    for (int64_t peer : t.tiedStages) {
      if (peer == self)
        continue;
      MessageKey k = tiedKey(self, peer, t.tie);
      Transport::Message msg = transport.acquire(k, sum.byteSize());
      std::memcpy(msg.data(), own.data(), sum.byteSize());
      transport.postSend(k, std::move(msg));
    }
  }
  // The sum in stage order, the same on every copy: ((g0 + g1) + g2) ...
  // The parts before this stage's own add up in the first one's message
  // (held until released); adding the own part to that partial sum in
  // place (a + b is b + a exactly) continues in the own buffer.
  for (const WiringSpec::Trained &t : wiring.trained) {
    if (t.tiedStages.empty())
      continue;
    const TensorSlot &sum = optSpec->inputs[t.sum];
    size_t n = static_cast<size_t>(sum.numElements());
    float *acc = tiedSums[t.tie].data();
    Transport::Message first;
    MessageKey firstKey{};
    float *partial = nullptr; // the sum of the parts before the own one
    bool ownSeen = false;
    for (int64_t peer : t.tiedStages) {
      if (peer == self) {
        if (partial)
          for (size_t e = 0; e < n; ++e)
            acc[e] = partial[e] + acc[e];
        ownSeen = true;
        continue;
      }
      MessageKey k = tiedKey(peer, self, t.tie);
      Transport::Message msg = transport.wait(k);
      const float *part = reinterpret_cast<const float *>(msg.data());
      if (ownSeen) {
        for (size_t e = 0; e < n; ++e)
          acc[e] = acc[e] + part[e];
      } else if (!partial) {
        first = std::move(msg);
        firstKey = k;
        partial = reinterpret_cast<float *>(first.data());
        continue;
      } else {
        for (size_t e = 0; e < n; ++e)
          partial[e] = partial[e] + part[e];
      }
      transport.release(k, std::move(msg));
    }
    if (partial)
      transport.release(firstKey, std::move(first));
    exec->device().copyToDevice(oa + sum.offset, acc, sum.byteSize());
  }
}

void StreamRunner::optimizerStep(const StepContext &context) {
  if (backwards != context.microBatches)
    throw std::runtime_error(
        "stage " + std::to_string(spec_.index) + ": optimizer step after " +
        std::to_string(backwards) + " of " +
        std::to_string(context.microBatches) + " backwards");
  {
    Part exchange(*this, breakdown_.exchange, &kGradientExchange);
    if (reducer)
      finishReplicaSums(context);
    sumTiedGradients();
  }
  // The update itself is compiled into the stage (gpipe-append-optimizer);
  // the runtime sets this step's hyper-parameters.
  for (auto &[hyper, input] : wiring.hyper) {
    float v = context.hyper.at(static_cast<size_t>(hyper));
    exec->write(opt, optSpec->inputs[input], &v);
  }
  exec->run(opt);
}

void StreamRunner::run(const Instruction &instr, const StepContext &context) {
  int64_t mb = instr.microBatch;
  switch (instr.op) {
  case Instruction::Op::RecvActivation:
  case Instruction::Op::RecvGradient: {
    MessageKey k = transferKey(instr);
    Part waiting(*this,
                 breakdown_.waits[k.kind == MessageKind::Activation ? 0 : 1]);
    receivedOf(k.kind)[mb] = transport.wait(k);
    return;
  }
  case Instruction::Op::Forward:
    forward(mb, context);
    return;
  case Instruction::Op::SendActivation: {
    Part messages(*this, breakdown_.messages[0], &kMessages);
    postOutgoing(instr);
    return;
  }
  case Instruction::Op::Recompute: {
    // The recomputation is compiled into the backward entry point; here
    // the stage input kept by the forward goes back in place (unless the
    // forward put it there).
    Part stashing(*this, breakdown_.stash[1], &kStashCopies);
    if (!restored.count(mb))
      loadStash(mb, context);
    return;
  }
  case Instruction::Op::Backward:
    backward(mb, context);
    return;
  case Instruction::Op::BackwardInput:
    backward(mb, context); // its input part: the stage splits them
    return;
  case Instruction::Op::BackwardWeight:
    backwardWeight(mb, context);
    return;
  case Instruction::Op::SendGradient: {
    Part messages(*this, breakdown_.messages[1], &kMessages);
    postOutgoing(instr);
    return;
  }
  case Instruction::Op::OptimizerStep: {
    Part step(*this, breakdown_.optimizer);
    optimizerStep(context);
    return;
  }
  }
}

// Between steps no training message is in flight: an evaluation's
// messages are those of micro-batch 0.
void StreamRunner::receiveForEvaluation() {
  MessageKey k = key(MessageKind::Activation, spec_.index - 1, 0, false);
  transport.postReceive(k, static_cast<size_t>(wiring.recvActivations.bytes));
  received[0] = transport.wait(k);
  receive(wiring.recvActivations, *fwdSpec, exec->arena(fwd), k, "evaluation");
}

void StreamRunner::sendForEvaluation() {
  send(wiring.sendActivations, *fwdSpec, exec->arena(fwd),
       key(MessageKind::Activation, spec_.index + 1, 0, true));
}

void StreamRunner::evaluate(const std::map<std::string, HostTensor> &microBatch,
                            const StreamRunner *previous) {
  for (const TensorSlot *slot : dataIn) {
    auto it = microBatch.find(slot->name);
    if (it == microBatch.end() ||
        static_cast<int64_t>(it->second.data.size()) != slot->byteSize())
      throw InputError("evaluation batch '" + slot->name +
                       "' must have the compiled micro-batch shape " +
                       std::to_string(slot->byteSize()) + " bytes");
    exec->write(fwd, *slot, it->second.data.data());
  }
  if (previous) {
    // Through the host: the stages may be on different devices.
    std::vector<char> bytes;
    for (const MessageLayout::Entry &e : wiring.recvActivations.tensors) {
      const TensorSlot &slot = fwdSpec->inputs[e.slot];
      const TensorSlot &source = previous->fwdSpec->outputs[e.senderSlot];
      bytes.resize(static_cast<size_t>(source.byteSize()));
      previous->exec->read(previous->fwd, source, bytes.data());
      exec->write(fwd, slot, bytes.data());
    }
  }
  exec->setUpdateState(false);
  exec->run(fwd);
}

} // namespace gpipe::runtime
