#include "gpipe/runtime/InferenceSession.h"

#include "DeviceWorker.h"
#include "MessagePacking.h"
#include "StageExecutor.h"
#include "StageHandoff.h"
#include "Transport.h"

#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/ProcessGroup.h"

#include <cstring>
#include <exception>

namespace gpipe::runtime {

/// A stage of pipelined inference: its code on its device's thread, and
/// the data inputs its forward reads.
struct InferenceSession::PipelineStage {
  std::unique_ptr<DeviceWorker> worker;
  std::unique_ptr<StageExecutor> executor;
  std::vector<const TensorSlot *> dataInputs;
};

InferenceSession::InferenceSession(const std::string &bundlePath,
                                   ProcessGroup *group)
    : bundle_(loadBundle(bundlePath)) {
  if (bundle_.mode != "infer")
    throw BundleError(bundlePath + ": manifest.json: a '" + bundle_.mode +
                      "' bundle cannot run inference");
  // A stage on the whole host ("cpu", unpinned) runs on the caller's
  // thread; a stage that names its device, on that device's thread (a
  // CPU's cores pinned), as every stage of a pipeline does.
  if (bundle_.stages.size() == 1 && bundle_.stages.front().device == "cpu") {
    StageSpec &spec = bundle_.stages.front();
    stage = std::make_unique<StageExecutor>(bundle_, spec,
                                            createBackend(spec.device));
    return;
  }
  int64_t ranks = bundle_.rankCount();
  if (ranks > 1 && !group)
    throw BundleError(bundlePath + ": the bundle's stages run in " +
                      std::to_string(ranks) + " processes (ranks 0.." +
                      std::to_string(ranks - 1) +
                      "): launch it with mpirun -np " + std::to_string(ranks) +
                      " gpipe-run ...");
  if (group && group->size() != ranks)
    throw BundleError(bundlePath + ": the bundle's stages are on " +
                      std::to_string(ranks) + " rank(s), but mpirun started " +
                      std::to_string(group->size()) + " processes (use " +
                      "mpirun -np " + std::to_string(ranks) + ")");
  rank = group ? group->rank() : 0;
  if (ranks > 1) {
    std::vector<std::string> localDevices;
    std::vector<int64_t> stageRanks;
    for (const StageSpec &spec : bundle_.stages) {
      stageRanks.push_back(spec.rank);
      if (spec.rank == rank)
        localDevices.push_back(spec.device);
    }
    // Each rank checks its own devices on its own host (loadBundle
    // checked those of a bundle of one rank).
    checkHostHasDevices(bundle_, localDevices);
    transport = group->createTransport(stageRanks);
  }
  for (StageSpec &spec : bundle_.stages) {
    if (spec.rank != rank) {
      pipeline.push_back(nullptr); // another rank's
      continue;
    }
    std::vector<Device> devices;
    try {
      devices = parseDevices(spec.device);
    } catch (const std::exception &e) {
      throw BundleError(bundlePath + ": manifest.json: stage " +
                        std::to_string(spec.index) + ": " + e.what());
    }
    if (devices.size() != 1)
      throw BundleError(bundlePath + ": manifest.json: stage " +
                        std::to_string(spec.index) + " is on '" + spec.device +
                        "': a pipeline stage runs on one device");
    auto st = std::make_unique<PipelineStage>();
    // A CPU stage's thread is pinned to its cores (its oneDNN threads
    // with it); a GPU stage's only drives its GPU.
    st->worker = std::make_unique<DeviceWorker>(
        devices[0].kind == DeviceKind::Cpu ? devices[0].ids
                                           : std::vector<int>{});
    // oneDNN sizes a primitive's work for the threads of the thread that
    // creates it: the device's own.
    st->worker->start([&] {
      st->executor = std::make_unique<StageExecutor>(
          bundle_, spec, createBackend(spec.device));
    });
    st->worker->wait();
    for (const TensorSlot &in : spec.phases.front().inputs)
      if (in.role == Role::Data)
        st->dataInputs.push_back(&in);
    pipeline.push_back(std::move(st));
  }
}

InferenceSession::~InferenceSession() = default;

void InferenceSession::setProfile(bool enable) {
  profiling = enable;
  profiledChunks = 0;
  if (stage)
    stage->setKernelProfile(enable);
  for (auto &st : pipeline)
    if (st)
      st->executor->setKernelProfile(enable);
}

std::map<std::string, double> InferenceSession::opProfile() const {
  std::map<std::string, double> out;
  if (profiledChunks == 0)
    return out;
  auto add = [&](const StageExecutor &st) {
    const PhaseSpec &fwd = st.phase(0);
    auto sum = [&](const auto &specs, const std::vector<double> &seconds) {
      for (size_t i = 0; i < specs.size() && i < seconds.size(); ++i)
        if (!specs[i].op.empty())
          out[specs[i].op] += seconds[i] / static_cast<double>(profiledChunks);
    };
    if (!st.kernelSeconds().empty())
      sum(fwd.kernels, st.kernelSeconds().front());
    if (!st.loopSeconds().empty())
      sum(fwd.loops, st.loopSeconds().front());
  };
  if (stage)
    add(*stage);
  for (const auto &st : pipeline)
    if (st)
      add(*st->executor);
  return out;
}

bool InferenceSession::ownsOutputs() const {
  return bundle_.stages.back().rank == rank;
}

int64_t InferenceSession::compiledBatch() const {
  if (bundle_.inputs.empty() || bundle_.inputs.front().shape.empty())
    return 1;
  return bundle_.inputs.front().shape.front();
}

namespace {
/// The slot as a user gives it: in the model's layout.
std::string describeSlot(const TensorSlot &s) {
  HostTensor t;
  t.dtype = s.dtype;
  t.shape = s.shape.empty() ? s.shape : s.dataShape(s.shape.front());
  return t.describe();
}
} // namespace

std::map<std::string, HostTensor>
InferenceSession::run(const std::map<std::string, HostTensor> &given) {
  if (!failedRun.empty())
    throw TransportError(failedRun);
  // Inputs in the model's layout whose samples are not first (a
  // sequence-first [T, B] input) as the compiled phase takes them; the
  // others as given.
  std::map<std::string, HostTensor> moved;
  std::map<std::string, const HostTensor *> inputs;
  for (const auto &[name, tensor] : given)
    inputs[name] = &tensor;
  for (const TensorSlot &slot : bundle_.inputs) {
    auto it = given.find(slot.name);
    if (slot.dataBatchAxis == 0 || it == given.end())
      continue;
    if (!slot.holdsData(it->second.shape))
      throw InputError("input '" + slot.name + "' is " + it->second.describe() +
                       " but the model expects " + describeSlot(slot) +
                       " (its samples on axis " +
                       std::to_string(slot.dataBatchAxis) + ")");
    inputs[slot.name] =
        &(moved[slot.name] = moveAxisToFront(it->second, slot.dataBatchAxis));
  }
  for (const auto &[name, tensor] : inputs) {
    bool known = false;
    for (const TensorSlot &s : bundle_.inputs)
      known |= s.name == name;
    if (!known) {
      std::string list;
      for (const TensorSlot &s : bundle_.inputs)
        list += (list.empty() ? "" : ", ") + s.name + " " + describeSlot(s);
      throw InputError("input '" + name +
                       "' is not an input of the model (its inputs: " + list +
                       ")");
    }
  }
  // Either every input has exactly its compiled shape (one run), or every
  // input is batched (first dimension = the compiled batch) and they all
  // bring the same number of rows (micro-batches of the compiled batch).
  bool exact = true, batched = !bundle_.inputs.empty();
  int64_t batch = compiledBatch(), rows = -1;
  for (const TensorSlot &slot : bundle_.inputs) {
    auto it = inputs.find(slot.name);
    if (it == inputs.end())
      throw InputError("input '" + slot.name + "' is missing (expected " +
                       describeSlot(slot) + ")");
    const std::vector<int64_t> &shape = it->second->shape;
    DType dtype = it->second->dtype;
    // NumPy has no bfloat16: uint16 bits stand for it.
    if (slot.dtype == DType::BF16 && dtype == DType::U16)
      dtype = DType::BF16;
    bool sameTail = dtype == slot.dtype && shape.size() == slot.shape.size() &&
                    !shape.empty();
    for (size_t i = 1; sameTail && i < slot.shape.size(); ++i)
      sameTail = shape[i] == slot.shape[i];
    exact &= dtype == slot.dtype && shape == slot.shape;
    batched &= sameTail && slot.shape.front() == batch && shape.front() > 0 &&
               (rows < 0 || shape.front() == rows);
    if (!shape.empty())
      rows = shape.front();
    if (dtype != slot.dtype || (!sameTail && shape != slot.shape))
      throw InputError("input '" + slot.name + "' is " +
                       given.at(slot.name).describe() + // as given
                       " but the model expects " + describeSlot(slot));
  }
  if (!exact && !batched)
    throw InputError("the inputs' first dimensions differ from the compiled "
                     "shapes and cannot be split into micro-batches of " +
                     std::to_string(batch) + " rows (expected " +
                     (bundle_.inputs.empty()
                          ? std::string("no inputs")
                          : describeSlot(bundle_.inputs.front())) +
                     ", ...)");
  if (exact)
    rows = batch;
  int64_t chunks = exact ? 1 : (rows + batch - 1) / batch;
  // Where each output carries the batch: viewed as [outer, batch, span
  // bytes], run c fills rows [c * batch, ...) of the middle dimension.
  struct Split {
    int64_t outer = 1, span = 0;
  };
  std::map<std::string, Split> splits;
  std::map<std::string, HostTensor> outputs;
  for (const TensorSlot &slot : bundle_.outputs) {
    HostTensor t;
    t.dtype = slot.dtype;
    t.shape = slot.shape;
    if (!exact) {
      int64_t axis = slot.batchAxis, inner = slot.batchInner;
      if (axis < 0 && !slot.shape.empty() && slot.shape.front() == batch)
        axis = 0, inner = 1; // a bundle without placements
      if (axis < 0 || slot.shape[axis] % (batch * inner) != 0)
        throw InputError(
            "the model was compiled for batch " + std::to_string(batch) +
            " and its output '" + slot.name + "' " + describeSlot(slot) +
            " does not carry the batch where gpipe can find "
            "it, so " +
            std::to_string(rows) + " rows cannot be split (give exactly " +
            std::to_string(batch) + " rows)");
      Split &s = splits[slot.name];
      s.outer = slot.shape[axis] / (batch * inner);
      for (int64_t i = 0; i < axis; ++i)
        s.outer *= slot.shape[i];
      s.span = inner * dtypeSize(slot.dtype);
      for (size_t i = axis + 1; i < slot.shape.size(); ++i)
        s.span *= slot.shape[i];
      t.shape[axis] = slot.shape[axis] / batch * rows;
    }
    t.data.resize(t.numElements() * dtypeSize(t.dtype));
    outputs[slot.name] = std::move(t);
  }
  // Micro-batch c's inputs into a stage's arena: every input of the model
  // it reads (`slots`: offsets in its arena), rows [c * batch, ...), a
  // last partial micro-batch padded with zeros.
  auto writeChunk = [&](StageExecutor &st,
                        const std::vector<const TensorSlot *> &slots,
                        int64_t c) {
    DeviceBackend &device = st.device();
    int64_t first = c * batch,
            count = exact ? 1 : std::min(batch, rows - first);
    for (const TensorSlot *slot : slots) {
      const char *src =
          reinterpret_cast<const char *>(inputs.at(slot->name)->data.data());
      if (exact) {
        st.write(0, *slot, src);
        continue;
      }
      char *dst = st.arena() + slot->offset;
      int64_t rowBytes = slot->byteSize() / batch;
      device.copyToDevice(dst, src + first * rowBytes, count * rowBytes);
      if (count < batch) {
        std::vector<char> zeros((batch - count) * rowBytes, 0);
        device.copyToDevice(dst + count * rowBytes, zeros.data(), zeros.size());
      }
    }
  };
  // Micro-batch c's outputs from the last stage's arena.
  auto readChunk = [&](StageExecutor &st, int64_t c) {
    DeviceBackend &device = st.device();
    int64_t first = c * batch,
            count = exact ? 1 : std::min(batch, rows - first);
    for (const TensorSlot &slot : bundle_.outputs) {
      char *dst = reinterpret_cast<char *>(outputs[slot.name].data.data());
      if (exact) {
        st.read(0, slot, dst);
        continue;
      }
      const Split &s = splits.at(slot.name);
      for (int64_t o = 0; o < s.outer; ++o)
        device.copyToHost(dst + (o * rows + first) * s.span,
                          st.arena() + slot.offset + o * batch * s.span,
                          count * s.span);
    }
  };
  if (profiling)
    profiledChunks += chunks;
  if (stage) {
    std::vector<const TensorSlot *> slots;
    for (const TensorSlot &slot : bundle_.inputs)
      slots.push_back(&slot);
    for (int64_t c = 0; c < chunks; ++c) {
      writeChunk(*stage, slots, c);
      stage->run();
      readChunk(*stage, c);
    }
    return outputs;
  }
  // On the stages' threads (one stage: its device's): each takes the
  // micro-batches in order, from the stage before through a ring of two
  // messages, and passes its activations on the same way; the last stage
  // writes the outputs.
  size_t k = pipeline.size();
  // Between two stages of this process a ring of buffers; to or from a
  // stage on another rank, the transport's messages.
  std::vector<std::unique_ptr<StageHandoff>> links(k > 0 ? k - 1 : 0);
  for (size_t s = 0; s + 1 < k; ++s)
    if (pipeline[s] && pipeline[s + 1])
      links[s] = std::make_unique<StageHandoff>(
          bundle_.stages[s].wiring.sendActivations.bytes);
  // Across ranks, flow control: the receiver of stage s's activations
  // sends a one-byte credit back for each micro-batch it has unpacked, and
  // the sender stays at most kCredits micro-batches ahead (without it a
  // fast first stage would queue every micro-batch of the inputs).
  // Messages in flight are at most kCredits apart, so micro-batch c goes
  // by c modulo 2 * kCredits: the MPI tags stay few however many
  // micro-batches the inputs hold.
  constexpr int64_t kCredits = 2;
  auto slotOf = [](int64_t c) { return c % (2 * kCredits); };
  auto creditKey = [&](size_t receiver, int64_t c) {
    return MessageKey{static_cast<int64_t>(receiver),
                      static_cast<int64_t>(receiver) - 1, MessageKind::Gradient,
                      slotOf(c)};
  };
  auto waitCredit = [&](size_t receiver, int64_t c) {
    MessageKey credit = creditKey(receiver, c);
    transport->release(credit, transport->wait(credit));
  };
  auto abortAll = [&](const std::string &why) {
    for (auto &link : links)
      if (link)
        link->abort();
    if (transport)
      transport->abort(why);
  };
  for (size_t s = 0; s < k; ++s) {
    if (!pipeline[s])
      continue;
    pipeline[s]->worker->start([&, s] {
      StageExecutor &st = *pipeline[s]->executor;
      const StageSpec &spec = bundle_.stages[s];
      const PhaseSpec &fwd = spec.phases.front();
      DeviceBackend &device = st.device();
      const MessageLayout &in = spec.wiring.recvActivations,
                          &out = spec.wiring.sendActivations;
      try {
        for (int64_t c = 0; c < chunks; ++c) {
          if (s > 0) {
            MessageKey key{static_cast<int64_t>(s) - 1, static_cast<int64_t>(s),
                           MessageKind::Activation, slotOf(c)};
            Transport::Message received;
            const char *message = nullptr;
            if (links[s - 1]) {
              message = links[s - 1]->acquireFull();
              if (!message)
                return; // another stage failed
            } else {
              transport->postReceive(key, static_cast<size_t>(in.bytes));
              received = transport->wait(key);
              message = received.data();
            }
            unpackMessage(device, in, fwd.inputs, message, st.arena());
            if (links[s - 1]) {
              links[s - 1]->release();
            } else {
              transport->release(key, std::move(received));
              // Its buffer is free: a credit back to the sender.
              MessageKey credit = creditKey(s, c);
              transport->postSend(credit, transport->acquire(credit, 1));
            }
          }
          writeChunk(st, pipeline[s]->dataInputs, c);
          st.run();
          if (s + 1 == k) {
            readChunk(st, c);
            continue;
          }
          MessageKey key{static_cast<int64_t>(s), static_cast<int64_t>(s) + 1,
                         MessageKind::Activation, slotOf(c)};
          Transport::Message sent;
          char *message = nullptr;
          if (links[s]) {
            message = links[s]->acquireFree();
            if (!message)
              return;
          } else {
            // At most kCredits messages ahead of the receiver: before
            // micro-batch c, the credit for c - kCredits.
            transport->postReceive(creditKey(s + 1, c), 1);
            if (c >= kCredits)
              waitCredit(s + 1, c - kCredits);
            sent = transport->acquire(key, static_cast<size_t>(out.bytes));
            message = sent.data();
          }
          packMessage(device, out, fwd.outputs, st.arena(), message);
          if (links[s])
            links[s]->publish();
          else
            transport->postSend(key, std::move(sent));
        }
        // The last credits, so that every message of the run was taken.
        if (s + 1 < k && !links[s])
          for (int64_t c = std::max<int64_t>(0, chunks - kCredits); c < chunks;
               ++c)
            waitCredit(s + 1, c);
      } catch (const std::exception &e) {
        abortAll(e.what());
        throw;
      } catch (...) {
        abortAll("a stage failed");
        throw;
      }
    });
  }
  std::exception_ptr failure;
  for (auto &st : pipeline) {
    if (!st)
      continue;
    try {
      st->worker->wait();
    } catch (...) {
      if (!failure)
        failure = std::current_exception();
    }
  }
  if (failure) {
    // An aborted transport takes no more messages: this session is done.
    if (transport)
      failedRun = "a run across ranks failed; load the bundle again";
    std::rethrow_exception(failure);
  }
  if (transport)
    transport->reset(); // the sends taken; ready for the next run
  if (!ownsOutputs())
    return {};
  return outputs;
}

} // namespace gpipe::runtime
