//===- StageWiring.cpp - How a pipeline's stages connect ------------------===//
#include "Bundle/StageWiring.h"

#include "GPipe/IR/GPipeOps.h"
#include "Transforms/StashPrecision.h"

#include "gpipe/common/DType.h"

#include "llvm/ADT/MapVector.h"

using namespace mlir;
namespace json = llvm::json;

namespace gpipe {

namespace {

/// One input or output of a lowered phase (its gpipe.inputs/outputs entry).
struct Slot {
  int64_t index;
  StringRef name;
  Role role;
  int64_t bytes;
  /// A backward input the stash may keep in bfloat16 (LowerStage's
  /// stash_dtype).
  bool keptBf16 = false;
  /// A forward input that may come from the stage before in bfloat16
  /// (LowerStage's message_dtype).
  bool receivedBf16 = false;
};

SmallVector<Slot> slotsOf(func::FuncOp phase, StringRef which) {
  SmallVector<Slot> out;
  for (auto [i, a] :
       llvm::enumerate(phase->getAttrOfType<ArrayAttr>(which).getValue())) {
    auto dict = cast<DictionaryAttr>(a);
    int64_t bytes = 1;
    for (Attribute d : dict.getAs<ArrayAttr>("shape"))
      bytes *= cast<IntegerAttr>(d).getInt();
    std::optional<DType> dtype =
        dtypeFromMlirName(dict.getAs<StringAttr>("dtype").getValue().str());
    bytes *= dtype ? static_cast<int64_t>(dtypeSize(*dtype)) : 1;
    auto stashType = dict.getAs<StringAttr>("stash_dtype");
    auto messageType = dict.getAs<StringAttr>("message_dtype");
    out.push_back({static_cast<int64_t>(i),
                   dict.getAs<StringAttr>("name").getValue(),
                   dict.getAs<RoleAttr>("role").getValue(), bytes,
                   stashType && stashType.getValue() == "bf16",
                   messageType && messageType.getValue() == "bf16"});
  }
  return out;
}

const Slot *findSlot(ArrayRef<Slot> slots, StringRef name) {
  for (const Slot &s : slots)
    if (s.name == name)
      return &s;
  return nullptr;
}

/// A message: the slots of one phase packed one after the other.
json::Object layout(ArrayRef<Slot> slots, Role role, StringRef key) {
  json::Array tensors;
  int64_t bytes = 0;
  for (const Slot &s : slots)
    if (s.role == role) {
      tensors.push_back(json::Object{{key, s.index}, {"offset", bytes}});
      bytes += s.bytes;
    }
  return json::Object{{"bytes", bytes}, {"tensors", std::move(tensors)}};
}

/// Whether the activation `sent` goes to the stage after in bfloat16: its
/// receiver (`nextIn`, that stage's forward inputs) takes it so.
bool sentInBf16(const Slot &sent, const SmallVector<Slot> *nextIn) {
  const Slot *in = nextIn ? findSlot(*nextIn, sent.name) : nullptr;
  return in && in->receivedBf16;
}

/// A forward's messages: the activations it sends (in bfloat16 where the
/// stage after, `nextIn`, takes them so), and each it receives at its
/// offset in the message of the stage before (`prevOut`, its forward's
/// outputs; null for the first stage). Both sides lay a message out by
/// the same rule, the sender's outputs in order.
LogicalResult wireActivations(const SmallVector<Slot> *prevOut,
                              const SmallVector<Slot> *nextIn,
                              ArrayRef<Slot> fwdIn, ArrayRef<Slot> fwdOut,
                              size_t k, func::FuncOp forward,
                              json::Object &wiring) {
  auto fail = [&](const Twine &why) {
    return forward.emitError("internal: stage ") << k << ": " << why;
  };
  // A tensor of `bytes` in a message, and the next one's offset.
  auto entry = [](json::Object e, int64_t bytes, bool bf16, int64_t &offset) {
    e["offset"] = offset;
    if (bf16)
      e["dtype"] = "bf16";
    offset += bf16 ? bf16StashBytes(bytes) : bytes;
    return e;
  };
  json::Array sendAct;
  int64_t sendActBytes = 0;
  for (const Slot &out : fwdOut)
    if (out.role == Role::Activation)
      sendAct.push_back(entry(json::Object{{"output", out.index}}, out.bytes,
                              sentInBf16(out, nextIn), sendActBytes));
  wiring["send_activations"] =
      json::Object{{"bytes", sendActBytes}, {"tensors", std::move(sendAct)}};
  json::Array recvAct;
  int64_t recvActBytes = 0;
  if (prevOut) {
    int64_t offset = 0;
    for (const Slot &sent : *prevOut) {
      if (sent.role != Role::Activation)
        continue;
      const Slot *in = findSlot(fwdIn, sent.name);
      if (!in) {
        offset += sent.bytes;
        continue;
      }
      if (in->role != Role::Activation || in->bytes != sent.bytes)
        return fail("input '" + in->name + "' does not match stage " +
                    Twine(k - 1) + "'s output");
      recvAct.push_back(entry(
          json::Object{{"input", in->index}, {"sender_output", sent.index}},
          in->bytes, in->receivedBf16, offset));
    }
    recvActBytes = offset;
  }
  for (const Slot &in : fwdIn)
    if (in.role == Role::Activation &&
        (!prevOut || !findSlot(*prevOut, in.name)))
      return fail("input '" + in.name + "' is no output of the stage before");
  wiring["recv_activations"] =
      json::Object{{"bytes", recvActBytes}, {"tensors", std::move(recvAct)}};
  return success();
}

/// The activation a gradient belongs to: "output_grad:act:3" and
/// "input_grad:act:3" are both of "act:3" (Autodiff's names).
StringRef gradientOf(StringRef name) { return name.split(':').second; }

} // namespace

FailureOr<SmallVector<json::Object>> wireStages(ArrayRef<StagePhases> stages) {
  struct Phases {
    SmallVector<Slot> fwdIn, fwdOut, bwdIn, bwdOut, optIn;
    /// A split backward's weight part (empty otherwise); gradOut: where
    /// the parameters' gradients come out (bwdOut or weightOut).
    SmallVector<Slot> weightIn, weightOut;
    bool split = false;
    const SmallVector<Slot> &gradOut() const {
      return split ? weightOut : bwdOut;
    }
  };
  std::vector<Phases> all;
  for (const StagePhases &s : stages) {
    Phases p{slotsOf(s.forward, "gpipe.inputs"),
             slotsOf(s.forward, "gpipe.outputs"),
             slotsOf(s.backward, "gpipe.inputs"),
             slotsOf(s.backward, "gpipe.outputs"),
             slotsOf(s.optimizer, "gpipe.inputs")};
    if (s.backwardWeight) {
      p.weightIn = slotsOf(s.backwardWeight, "gpipe.inputs");
      p.weightOut = slotsOf(s.backwardWeight, "gpipe.outputs");
      p.split = true;
    }
    all.push_back(std::move(p));
  }
  // Weights trained by several stages (tied embeddings): the stages of
  // each, and one tie id per weight in order of first appearance.
  llvm::MapVector<StringRef, SmallVector<int64_t>> trainedBy;
  for (auto [k, stage] : llvm::enumerate(stages))
    for (StringRef param : stage.parameters)
      if (findSlot(all[k].gradOut(), ("grad:" + param).str()))
        trainedBy[param].push_back(static_cast<int64_t>(k));
  SmallVector<json::Object> out;
  for (auto [k, stage] : llvm::enumerate(stages)) {
    const Phases &p = all[k];
    auto fail = [&](const Twine &why) {
      func::FuncOp forward = stage.forward;
      return forward.emitError("internal: stage ") << k << ": " << why;
    };
    json::Object wiring;
    if (failed(wireActivations(k == 0 ? nullptr : &all[k - 1].fwdOut,
                               k + 1 < all.size() ? &all[k + 1].fwdIn : nullptr,
                               p.fwdIn, p.fwdOut, k, stage.forward, wiring)))
      return failure();
    wiring["send_gradients"] = layout(p.bwdOut, Role::InputGrad, "output");

    // Each received gradient at its offset in the next stage's message.
    json::Array recvGrad;
    int64_t recvGradBytes = 0;
    if (k + 1 < stages.size()) {
      const Phases &next = all[k + 1];
      int64_t offset = 0;
      for (const Slot &sent : next.bwdOut) {
        if (sent.role != Role::InputGrad)
          continue;
        for (const Slot &in : p.bwdIn)
          if (in.role == Role::OutputGrad &&
              gradientOf(in.name) == gradientOf(sent.name)) {
            if (in.bytes != sent.bytes)
              return fail("gradient '" + in.name + "' has another size");
            recvGrad.push_back(
                json::Object{{"input", in.index}, {"offset", offset}});
          }
        offset += sent.bytes;
      }
      recvGradBytes = offset;
    }
    int64_t seeds = 0;
    for (const Slot &in : p.bwdIn)
      seeds += in.role == Role::OutputGrad;
    if (seeds != static_cast<int64_t>(recvGrad.size()))
      return fail("a backward seed has no gradient from the next stage");
    wiring["recv_gradients"] = json::Object{{"bytes", recvGradBytes},
                                            {"tensors", std::move(recvGrad)}};

    // What the backward reads besides its seeds: a forward output or a
    // received input kept in the stash, or a data input read again.
    json::Array carried;
    int64_t stashBytes = 0;
    for (const Slot &in : p.bwdIn) {
      if (in.role == Role::LossGrad || in.role == Role::OutputGrad)
        continue;
      json::Object c{{"input", in.index}};
      const Slot *source = findSlot(p.fwdOut, in.name);
      StringRef from = "forward_output";
      if (!source) {
        source = findSlot(p.fwdIn, in.name);
        from = source && source->role == Role::Activation ? "forward_input"
                                                          : "batch";
      }
      if (!source)
        return fail("backward input '" + in.name + "' comes from nowhere");
      if (source->bytes != in.bytes)
        return fail("'" + in.name + "' differs between the phases");
      c["from"] = from.str();
      c["index"] = source->index;
      if (from != "batch") {
        // In bfloat16 where LowerStage found that the backward (both
        // parts of a split one) only multiplies it in bfloat16.
        c["stash_offset"] = stashBytes;
        if (in.keptBf16)
          c["stash_dtype"] = "bf16";
        stashBytes += in.keptBf16 ? bf16StashBytes(in.bytes) : in.bytes;
      }
      carried.push_back(std::move(c));
    }
    // A split backward's weight part: each input from the stash (as the
    // input part reads it), from the batch, the loss gradient's seed, or
    // what the input part read (a received gradient) or computed (a carry),
    // kept after the stash until the weight part runs.
    if (p.split) {
      json::Array weightInputs;
      for (const Slot &in : p.weightIn) {
        json::Object w{{"input", in.index}};
        const Slot *source = nullptr;
        if (in.role == Role::Carry) {
          source = findSlot(p.bwdOut, in.name);
          w["from"] = "backward_output";
        } else {
          source = findSlot(p.bwdIn, in.name);
          w["from"] = "backward_input";
        }
        if (!source || source->bytes != in.bytes)
          return fail("weight gradients' input '" + in.name +
                      "' is not the input part's");
        w["index"] = source->index;
        if (keptForWeightPart(in.role)) {
          w["kept"] = true;
          w["stash_offset"] = stashBytes;
          stashBytes += in.bytes;
        }
        weightInputs.push_back(std::move(w));
      }
      wiring["weight_inputs"] = std::move(weightInputs);
    }
    wiring["carried"] = std::move(carried);
    wiring["stash_bytes"] = stashBytes;

    // Per trained parameter: its gradient and where the micro-batches'
    // gradients are summed for the optimizer.
    json::Array trained;
    for (auto [i, param] : llvm::enumerate(stage.parameters)) {
      std::string name = ("grad:" + param).str();
      const Slot *grad = findSlot(p.gradOut(), name);
      if (!grad)
        continue;
      const Slot *sum = findSlot(p.optIn, name);
      if (grad->role != Role::ParamGrad || !sum ||
          sum->role != Role::ParamGrad || sum->bytes != grad->bytes)
        return fail("the gradient of '" + param + "' has no optimizer input");
      json::Object entry{{"parameter", static_cast<int64_t>(i)},
                         {"gradient", grad->index},
                         {"sum", sum->index}};
      auto tied = trainedBy.find(param);
      if (tied->second.size() > 1) {
        entry["tie"] = static_cast<int64_t>(tied - trainedBy.begin());
        entry["tied_stages"] = json::Array(tied->second);
      }
      trained.push_back(std::move(entry));
    }
    wiring["trained"] = std::move(trained);
    json::Array hyper;
    for (const Slot &in : p.optIn)
      if (in.role == Role::Hyper)
        hyper.push_back(json::Object{{"input", in.index},
                                     {"hyper", in.name.split(':').second}});
    wiring["hyper"] = std::move(hyper);

    for (const Slot &o : p.fwdOut)
      if (o.role == Role::Loss)
        wiring["loss"] = o.index;
    for (const Slot &in : p.bwdIn)
      if (in.role == Role::LossGrad)
        wiring["loss_grad"] = in.index;
    for (const Slot &o : p.fwdOut)
      if (o.role == Role::Output) {
        wiring["output"] = o.index;
        break;
      }
    out.push_back(std::move(wiring));
  }
  return out;
}

FailureOr<SmallVector<json::Object>>
wireInferenceStages(ArrayRef<func::FuncOp> forwards) {
  SmallVector<SmallVector<Slot>> ins, outs;
  for (func::FuncOp f : forwards) {
    ins.push_back(slotsOf(f, "gpipe.inputs"));
    outs.push_back(slotsOf(f, "gpipe.outputs"));
  }
  SmallVector<json::Object> out;
  for (size_t k = 0; k < forwards.size(); ++k) {
    json::Object wiring;
    if (failed(wireActivations(k == 0 ? nullptr : &outs[k - 1],
                               k + 1 < ins.size() ? &ins[k + 1] : nullptr,
                               ins[k], outs[k], k, forwards[k], wiring)))
      return failure();
    if (k + 1 == forwards.size())
      for (const Slot &o : outs[k])
        if (o.role == Role::Output) {
          wiring["output"] = o.index;
          break;
        }
    out.push_back(std::move(wiring));
  }
  return out;
}

} // namespace gpipe
