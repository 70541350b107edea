//===- GPipeOps.td - The gpipe dialect ---------------------*- tablegen -*-===//
//
// Pipeline structure: parameters, stages, transfers between stages, stashed
// activations and the static per-device schedule.
//
//===----------------------------------------------------------------------===//

#ifndef GPIPE_GPIPE_OPS
#define GPIPE_GPIPE_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def GPipe_Dialect : Dialect {
  let name = "gpipe";
  let cppNamespace = "::gpipe";
  let summary = "Pipeline-parallel structure of a training program";
  let usePropertiesForAttributes = 0;
  let useDefaultAttributePrinterParser = 1;
}

include "GPipe/IR/GPipeAttrs.td"

class GPipe_Op<string mnemonic, list<Trait> traits = []>
    : Op<GPipe_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def GPipe_ParameterOp : GPipe_Op<"parameter", [Symbol]> {
  let summary = "A named model tensor with its initial value";
  let description = [{
    Imported from an ONNX initializer, or created by the compiler. What it
    is (`getKind()`, the manifest's `kind`, common/Role.h's ParamKind):
    `trainable` parameters (weights) get gradients and optimizer state;
    `optimizer_state` marks the optimizer's state of a weight (created by
    gpipe-append-optimizer); `constant` a constant of the stage's code
    (created by gpipe-lower-stage); a parameter with none of the three is
    model state that is not trained (BatchNorm running statistics), read or
    updated by its op's own rule. Large values are dense resources, so the
    IR text stays small.

    ```mlir
    gpipe.parameter @"fc1.weight" trainable = dense_resource<fc1.weight> : tensor<64x784xf32>
    gpipe.parameter @"__opt.momentum:fc1.weight" optimizer_state = dense<0.0> : tensor<64x784xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ElementsAttr:$value,
                       UnitAttr:$trainable, UnitAttr:$optimizer_state,
                       UnitAttr:$constant);
  let assemblyFormat = [{
    $sym_name (`trainable` $trainable^)? (`optimizer_state` $optimizer_state^)?
    (`constant` $constant^)? `=` $value attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getValue().getType());
    }
    ::gpipe::ParamKind getKind() {
      if (getTrainable())
        return ::gpipe::ParamKind::Weight;
      if (getOptimizerState())
        return ::gpipe::ParamKind::OptimizerState;
      if (getConstant())
        return ::gpipe::ParamKind::Constant;
      return ::gpipe::ParamKind::Buffer;
    }
  }];
}

def GPipe_GetParameterOp : GPipe_Op<"get_parameter", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The current value of a parameter";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def GPipe_AssignParameterOp : GPipe_Op<"assign_parameter", [
    MemoryEffects<[MemWrite]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Overwrite a parameter (the optimizer's update)";
  let description = [{
    Later gpipe.get_parameter ops of the parameter, in this or any later
    run, read `value`. Only the optimizer phase writes parameters.
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, AnyRankedTensor:$value);
  let assemblyFormat = "$name `,` $value attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Stages
//===----------------------------------------------------------------------===//

def GPipe_StageOp : GPipe_Op<"stage", [IsolatedFromAbove, SingleBlock]> {
  let summary = "A contiguous range of layers placed on one device";
  let description = [{
    The body receives the stage's inputs as block arguments and yields its
    outputs. Values cross stages only through the op's operands and results.

    ```mlir
    %y = gpipe.stage 0 on "cpu:0" (%x) : (tensor<8x16xf32>) -> tensor<8x16xf32> {
    ^bb0(%in: tensor<8x16xf32>):
      %r = nn.relu %in : tensor<8x16xf32>
      gpipe.yield %r : tensor<8x16xf32>
    }
    ```
  }];
  let arguments = (ins I64Attr:$index, StrAttr:$device,
                       Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $index `on` $device ` ` `(` $inputs `)` `:` functional-type($inputs, $outputs)
    attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

def GPipe_YieldOp : GPipe_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"StageOp">]> {
  let summary = "The outputs of a stage";
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Static schedule
//===----------------------------------------------------------------------===//

def GPipe_ScheduleOp : GPipe_Op<"schedule", [NoTerminator, SingleBlock,
    NoRegionArguments]> {
  let summary = "Per-device instruction streams of one training step";
  let description = [{
    Holds one `gpipe.stream` per stage. The verifier proves the schedule's
    invariants: every micro-batch runs forward then backward once on every
    stage (or its backward in two parts, `backward_input` then
    `backward_weight`), every receive has its matching send, the streams cannot deadlock
    (sends are asynchronous, receives block), and each stream ends with one
    optimizer step.
  }];
  let arguments = (ins I64Attr:$num_stages, I64Attr:$micro_batches);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `stages` `(` $num_stages `)` `micro_batches` `(` $micro_batches `)`
    attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
}

def GPipe_StreamOp : GPipe_Op<"stream", [NoTerminator, SingleBlock,
    NoRegionArguments, HasParent<"ScheduleOp">]> {
  let summary = "The ordered instructions of one stage's device";
  let description = [{
    Optional memory figures: `static_bytes` (parameters, gradients,
    optimizer state, phase arenas, transfer buffers), `stash_bytes` (what one
    micro-batch keeps from its forward to its backward) and `memory_limit`
    (the device's capacity). The schedule verifier computes the stream's
    exact peak, static_bytes + stash_bytes times the most micro-batches
    alive at once in this order, and rejects a peak over the limit.

    Streams with the same `device_group` run on one device in turns (an
    interleaved schedule): each of their compute instructions has a
    `turn`, its place in the device's order (0, 1, ... over the group's
    streams, rising in each), and runs only after the one before it in
    that order; their peaks together must fit the memory limit.
  }];
  let arguments = (ins I64Attr:$stage, StrAttr:$device,
                       OptionalAttr<I64Attr>:$static_bytes,
                       OptionalAttr<I64Attr>:$stash_bytes,
                       OptionalAttr<I64Attr>:$memory_limit,
                       OptionalAttr<I64Attr>:$device_group);
  let extraClassDeclaration = [{
    /// The most micro-batches whose forward has run and backward has not,
    /// and the first instruction after which that many are alive.
    std::pair<int64_t, ::mlir::Operation *> maxAliveMicroBatches();
    /// static_bytes + stash_bytes * maxStashedMicroBatches() (absent
    /// figures count as 0).
    int64_t peakBytes();
    /// The micro-batches whose forward hands its kept values straight to
    /// its backward (where the forward left them, in the arena the two
    /// phases share, else copied into the backward's) instead of the stash:
    /// the next forward, backward or recompute after the forward is that
    /// micro-batch's backward or recompute. Sends and receives in between
    /// touch no arena (the runtime fills a message when its forward or
    /// backward ends). A backward in two parts (backward_input, then
    /// backward_weight) always goes through the stash. The runtime applies
    /// the same rule (StreamRunner).
    ::llvm::SmallVector<int64_t> directlyCarriedMicroBatches();
    /// The most micro-batches kept in the stash at once (alive, and not
    /// directly carried: the stash slots the runtime allocates), and the
    /// first instruction after which that many are.
    std::pair<int64_t, ::mlir::Operation *> maxStashedMicroBatches();
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$stage `on` $device attr-dict-with-keyword $body";
}

class GPipe_Instr<string mnemonic, list<Trait> traits = []>
    : GPipe_Op<mnemonic, !listconcat(traits, [HasParent<"StreamOp">])>;

class GPipe_ComputeInstr<string mnemonic> : GPipe_Instr<mnemonic> {
  // turn: its place in its device's order, where streams share the device
  // (gpipe.stream's device_group).
  let arguments = (ins I64Attr:$micro_batch, OptionalAttr<I64Attr>:$turn);
  let assemblyFormat = "$micro_batch attr-dict";
}
def GPipe_ForwardInstr : GPipe_ComputeInstr<"forward"> {
  let summary = "Run the stage forward on a micro-batch";
}
def GPipe_RecomputeInstr : GPipe_ComputeInstr<"recompute"> {
  let summary = "Re-run the stage forward from the stashed input";
}
def GPipe_BackwardInstr : GPipe_ComputeInstr<"backward"> {
  let summary = "Run the stage backward, accumulating parameter gradients";
}
def GPipe_BackwardInputInstr : GPipe_ComputeInstr<"backward_input"> {
  let summary = "Run the input-gradient part of the stage backward (B)";
  let description = [{
    The part of the backward the previous stage waits for: its input
    gradients, sent after it. What the weight part reads stays alive until
    that micro-batch's `gpipe.backward_weight`.
  }];
}
def GPipe_BackwardWeightInstr : GPipe_ComputeInstr<"backward_weight"> {
  let summary = "Run the weight-gradient part of the stage backward (W)";
  let description = [{
    The parameter gradients of a micro-batch whose `gpipe.backward_input`
    has run, accumulated for the optimizer step; no stage waits for it, so
    a schedule places it where the stage would otherwise idle.
  }];
}

class GPipe_TransferInstr<string mnemonic> : GPipe_Instr<mnemonic> {
  let arguments = (ins I64Attr:$micro_batch, I64Attr:$peer);
  let assemblyFormat = "$micro_batch `peer` $peer attr-dict";
}
def GPipe_SendActivationInstr : GPipe_TransferInstr<"send_activation"> {
  let summary = "Send a micro-batch's stage outputs to the next stage";
}
def GPipe_RecvActivationInstr : GPipe_TransferInstr<"recv_activation"> {
  let summary = "Receive a micro-batch's stage inputs from the previous stage";
}
def GPipe_SendGradientInstr : GPipe_TransferInstr<"send_gradient"> {
  let summary = "Send a micro-batch's input gradients to the previous stage";
}
def GPipe_RecvGradientInstr : GPipe_TransferInstr<"recv_gradient"> {
  let summary = "Receive a micro-batch's output gradients from the next stage";
}

def GPipe_OptimizerStepInstr : GPipe_Instr<"optimizer_step"> {
  let summary = "Apply the accumulated gradients to the stage's parameters";
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Stage code
//===----------------------------------------------------------------------===//

def GPipe_ParallelForOp : GPipe_Op<"parallel_for",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Run an outlined loop body over [0, extent) on the device's cores";
  let description = [{
    Lowered stage code: `callee` is a function
    `(arena, params, begin: index, end: index)` that runs its loop nest for
    the outer iterations [begin, end). The runtime splits [0, extent) into
    one contiguous chunk per core of the stage's device and calls `callee`
    on each, in parallel (`gpipe_parallel_for` in docs/bundle.md); `ctx` is
    the stage function's runtime handle.

    ```mlir
    gpipe.parallel_for @gpipe_stage0_forward_loop3(%ctx) extent 64
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, I64:$ctx,
                       ConfinedAttr<I64Attr, [IntPositive]>:$extent);
  let assemblyFormat = "$callee `(` $ctx `)` `extent` $extent attr-dict";
}

#endif // GPIPE_GPIPE_OPS
