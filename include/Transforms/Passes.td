//===- Passes.td - gpipe passes ----------------------------*- tablegen -*-===//
#ifndef GPIPE_TRANSFORMS_PASSES
#define GPIPE_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def AnnotateCost : Pass<"gpipe-annotate-cost"> {
  let summary = "Attach each nn op's FLOPs and bytes moved as attributes";
  let description = [{
    Queries CostOpInterface on every op and sets `gpipe.flops`,
    `gpipe.bytes` and `gpipe.backward_bytes` (i64) and the kernel families
    of its forward and gradient, `gpipe.kernel_family` and
    `gpipe.kernel_family_backward` (strings). The cost model and the
    partitioner read the same numbers; this pass makes them visible and
    testable.
  }];
}

def FoldMatMulTranspose : Pass<"gpipe-fold-matmul-transpose"> {
  let summary = "A MatMul by a transposed matrix as a Gemm with trans_b, "
                "its bias row as the Gemm's C";
  let description = [{
    `nn.matmul %x, (nn.transpose %w {perm = [1, 0]})`, %w a [N, K]
    matrix (what exporters write for a Linear layer on a sequence,
    `x @ W.T`), becomes `nn.gemm %rows, %w {trans_b = true}` on the rows
    of %x ([..., K] reshaped to [R, K], and the result back to [..., N]:
    the reshapes alias). The transposed copy of the weights that each
    micro-batch's forward made, and the transpose of their gradient in
    its backward (strided copies: a 4-layer GPT's micro-batches of one
    row spent more time in them than in its matmuls), are gone; the
    product is the same.

    `nn.add` of a Gemm's result (through the rows' reshape, read by
    nothing else) and a bias row [N] becomes the Gemm's C (beta = 1),
    which the kernel adds in the product (oneDNN's bias): no pass of its
    own over the output; the bias's gradient is the same sum over the
    rows (GemmOp's VJP unbroadcasts C).
  }];
}

def FuseAttention : Pass<"gpipe-fuse-attention"> {
  let summary = "Scaled dot-product attention as one nn.attention";
  let description = [{
    `softmax(scale * q k^T + mask) v` as exporters write it (MatMul of the
    queries and the transposed keys, Mul or Div by a constant, a masked
    fill with -inf by Where or an added constant mask, Softmax over the
    keys, MatMul by the values) becomes `nn.attention %q, %k, %v[, %mask]
    {scale, causal}`: a kernel that never holds the Tq x Tk scores beyond a
    tile, forward or backward, and skips the tiles a causal mask hides (a
    constant mask that hides exactly the keys after each query becomes
    `causal`). The keys are the transposed keys' source with one transpose
    (the heads' transposes composed). Dropout on the weights becomes the
    op's `dropout_ratio` (and `stream`): the kernels draw the mask the
    dropout would. Values read by other ops and masks that are not
    constants (or Where's boolean conditions) leave the unfused ops as
    they are, and so do sequences of fewer than `min-keys` keys: there
    one batched product over every head in one library call runs faster
    than a tile per head (ViT's 65 tokens, D = 32, one core: 0.33 ms a
    layer unfused against 0.69 fused; at 64 keys the two tie, at 256 the
    fused kernels take 9.5 ms against 15.5).
  }];
  let options = [
    Option<"minKeys", "min-keys", "int64_t", "128",
           "The fewest keys an attention is fused for">,
  ];
}

def FuseGelu : Pass<"gpipe-fuse-gelu"> {
  let summary = "GELU written out with erf as one nn.gelu";
  let description = [{
    `x * (1 + erf(x / sqrt(2))) * 0.5` (what torch.onnx writes for
    nn.GELU below opset 20: Div, Erf, Add, Mul, Mul; and the Hugging Face
    order, `x * 0.5 * (1 + erf(...))`) becomes `nn.gelu %x`, and GPT-2's
    tanh form `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`
    `nn.gelu %x {approximate = "tanh"}`: one loop in the
    forward instead of three, and a backward that keeps x alone instead of
    x / sqrt(2) and 1 + erf(x / sqrt(2)) besides. An intermediate value
    with another use stays for it.
  }];
}

def SetInferenceMode : Pass<"gpipe-set-inference-mode"> {
  let summary = "Give dropout and batch_norm their inference behaviour";
  let description = [{
    Dropout becomes the identity and BatchNorm normalizes with its running
    statistics, as PyTorch's eval() mode does, whatever mode the model was
    exported in. A model that outputs the updated running statistics of a
    training-mode BatchNorm (ops marked `gpipe.running_statistic` by the
    importer) is refused: inference does not compute them.
  }];
}

def SetPrecision : Pass<"gpipe-set-precision"> {
  let summary = "Multiply the products of matrices in bfloat16 (--precision)";
  let description = [{
    With `precision=bf16`, every op that implements ComputeTypeOpInterface
    (Gemm, MatMul, the convolution and its gradients) gets
    `compute_type = "bf16"`: its kernel rounds the operands to bfloat16 and
    sums the products in float32, what `torch.autocast(dtype=torch.bfloat16)`
    does to the same ops. Tensors, the other ops (element-wise ops,
    normalizations, softmax, attention, losses) and the parameters stay
    float32. Run before autodiff: the gradients of a product multiply in
    its compute type. `precision=fp32` leaves the ops as they are.
  }];
  let options = [
    Option<"precision", "precision", "std::string", "\"fp32\"",
           "fp32 or bf16">,
  ];
}

def MarkBatchPlacement : Pass<"gpipe-mark-batch-placement", "mlir::ModuleOp"> {
  let summary = "Record where the batch sits in each output of @forward";
  let description = [{
    Each result of `@forward` that carries the inputs' batch gets
    `gpipe.batch = array<i64: axis, inner>`: the batch is in dimension
    `axis`, `inner` consecutive elements of which belong to one sample (a
    language model's logits viewed as [B * T, V]: axis 0, inner T). The
    runtime splits a large inference batch into runs of the compiled one
    and places each run's outputs by it (Analysis/BatchPlacement.h).
  }];
}

def ConvertElementwiseToLinalg : Pass<"gpipe-convert-elementwise-to-linalg"> {
  let summary = "Turn element-wise nn ops into linalg.generic on tensors";
  let description = [{
    Every op implementing ElementwiseOpInterface becomes a linalg.generic
    whose indexing maps broadcast its operands and whose body is the op's
    scalar computation. Upstream `--linalg-fuse-elementwise-ops` then fuses
    chains of them into single loops.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def LowerStage : Pass<"gpipe-lower-stage", "::mlir::ModuleOp"> {
  let summary = "Plan memory and lower @forward to a native stage function";
  let description = [{
    Gives every tensor of @forward a byte offset in one arena, reusing memory
    by liveness (reshapes alias their input), places parameters and
    constants in one read-only blob, and rewrites the function into
    `@<entry>(%arena: memref<?xi8>, %params: memref<?xi8>, %ctx: i64)`:
    linalg.generic ops work on views of the arena, heavy ops (gemm, matmul,
    conv, pooling, normalization, softmax) become calls
    `@gpipe_kernel(%ctx, %id)` into the runtime and a kernel table entry.
    The function carries the plan as attributes (gpipe.arena_size,
    gpipe.params_size, gpipe.inputs, gpipe.outputs, gpipe.kernels), which
    the bundle writer copies into the manifest.
  }];
  let options = [
    Option<"entryName", "entry", "std::string", "\"gpipe_stage0_forward\"",
           "Name of the generated stage function">,
    Option<"functionName", "function", "std::string", "\"forward\"",
           "The function to lower (forward, or forward_backward after "
           "gpipe-autodiff)">,
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::scf::SCFDialect",
                           "::gpipe::GPipeDialect"];
}

def AppendLoss : Pass<"gpipe-append-loss", "::mlir::ModuleOp"> {
  let summary = "Append the training loss to @forward";
  let description = [{
    `cross-entropy`: @forward must return one float tensor of logits whose
    last axis holds the classes ([N, C], or [B, T, V] for a language
    model), or axis `class-axis` ([N, C, H, W] segmentation logits with
    class-axis 1, as F.cross_entropy reads them: moved last by a
    transpose); an argument `labels` (i64 class indices shaped like the
    logits without their class axis) is added and @forward returns (loss, logits), loss the
    softmax cross-entropy averaged over the labels that are not
    `ignore-index`.
    `output:NAME`: the model computes its loss itself; the scalar output
    NAME moves to the front of the results.
  }];
  let options = [
    Option<"loss", "loss", "std::string", "\"cross-entropy\"",
           "cross-entropy | mse | output:NAME">,
    Option<"ignoreIndex", "ignore-index", "int64_t", "-100",
           "cross-entropy: labels with this value count for nothing">,
    Option<"classAxis", "class-axis", "int64_t", "-1",
           "cross-entropy: the logits' axis of the classes (-1: the last; "
           "1 for [N, C, H, W] as F.cross_entropy reads them)">,
  ];
  let dependentDialects = ["::gpipe::nn::NNDialect", "::gpipe::GPipeDialect"];
}

def Autodiff : Pass<"gpipe-autodiff", "::mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of @forward";
  let description = [{
    Replaces @forward (whose first result is the scalar loss) with
    @forward_backward: the same computation followed by the reverse sweep,
    built from each op's VJPOpInterface rule, last op first; gradients of
    values used several times are summed. It takes one more argument,
    `loss_grad` (the seed, e.g. 1/M for M micro-batches), and returns the
    forward results followed by the gradient of every trainable parameter
    (named "grad:<parameter>"), in module order.
  }];
  let dependentDialects = ["::gpipe::nn::NNDialect", "::gpipe::GPipeDialect"];
}


def SplitBackwardWeights : Pass<"gpipe-split-backward-weights",
                                "::mlir::ModuleOp"> {
  let summary = "Split @backward into input and weight gradients";
  let description = [{
    Zero-bubble schedules (Qi et al., ICLR 2024) run a stage's backward in
    two parts: B, the input gradients the previous stage waits for, as soon
    as possible, and W, the parameter gradients only the optimizer needs,
    wherever the stage would otherwise idle. @backward becomes:

    - @backward_input: @backward's arguments -> its input gradients
      ("input_grad"), then what the weight phase reads from it
      ("carry:<i>": values both phases need, computed once);
    - @backward_weight: the arguments of @backward it reads (by their
      names: stash values, data inputs when recomputing, seeds), then the
      carries -> the parameter gradients ("grad:<name>").

    B's ops are those the input gradients depend on; every other op is W's.
    Parameters and constants are read again where used, never carried. A
    stage without input gradients (the first) has an empty B. Per
    micro-batch, what @backward_weight reads stays alive from B until W:
    the schedule's memory accounts for it.
  }];
  let dependentDialects = ["::gpipe::nn::NNDialect", "::gpipe::GPipeDialect",
                           "::mlir::func::FuncDialect"];
}

def SplitForwardBackward : Pass<"gpipe-split-forward-backward",
                                "::mlir::ModuleOp"> {
  let summary = "Split @forward_backward into @forward and @backward";
  let description = [{
    The forward phase of a stage runs for every micro-batch before its
    backward phase (GPipe), so what the backward needs must be kept in
    between. @forward takes the data inputs and returns the forward results
    (the loss first), then what it keeps ("stash:<i>" results); @backward
    takes the kept values and `loss_grad` and returns the parameter
    gradients ("grad:<name>").

    `recompute` decides what is kept:
    - `never`: every forward value the backward reads (activations);
    - `always`: only the stage's data inputs; @backward runs the forward
      again first (those ops carry `gpipe.recompute`, so that BatchNorm does
      not update its running statistics twice);
    - `except-last`: `always` on every stage but the last, which runs its
      backward right after its forward anyway; on a single stage, `never`.
  }];
  let options = [
    Option<"recompute", "recompute", "std::string", "\"never\"",
           "never, always or except-last">,
    Option<"lastStage", "last-stage", "bool", "true",
           "Whether this is the pipeline's last stage (for except-last)">,
  ];
  let dependentDialects = ["::gpipe::nn::NNDialect", "::gpipe::GPipeDialect",
                           "::mlir::func::FuncDialect"];
}


def AppendOptimizer : Pass<"gpipe-append-optimizer", "::mlir::ModuleOp"> {
  let summary = "Add the @optimizer phase: one update of every parameter";
  let description = [{
    Builds `@optimizer(grad:<p>..., hyper:<name>...)`: for every trainable
    parameter, its update from its accumulated gradient, as nn element-wise
    ops, written back with gpipe.assign_parameter. The optimizer state
    (SGD's momentum buffer, Adam's moments) becomes non-trainable
    parameters `__opt.<kind>:<p>`, zero at the start. Hyper-parameters are
    scalar inputs that the runtime sets every step (so they can be
    overridden and scheduled): `hyper:lr` and `hyper:weight_decay`, for SGD
    `hyper:momentum`, for Adam and AdamW `hyper:beta1`, `hyper:beta2`,
    `hyper:eps`, `hyper:step_size` (lr / (1 - beta1^t)) and
    `hyper:bias_correction2` (sqrt(1 - beta2^t)). Semantics are PyTorch's:
    SGD adds weight decay to the gradient, keeps a momentum buffer (when
    `momentum` is not 0) and optionally Nesterov; Adam adds weight decay to
    the gradient, AdamW decays the parameter by lr * weight_decay.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"",
           "sgd, adam or adamw">,
    Option<"momentum", "momentum", "bool", "false",
           "SGD keeps a momentum buffer">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD with Nesterov momentum">,
  ];
  let dependentDialects = ["::gpipe::nn::NNDialect", "::gpipe::GPipeDialect",
                           "::mlir::func::FuncDialect"];
}


def Partition : Pass<"gpipe-partition", "::mlir::ModuleOp"> {
  let summary = "Cut @forward into one gpipe.stage per device";
  let description = [{
    The ops of @forward (after gpipe-append-loss), in their order, are cut
    into K contiguous stages, one per device of `devices`. Automatic
    partitioning is a dynamic program over the cut positions that minimizes
    the slowest stage's predicted time per micro-batch (forward + backward,
    plus the forward again under recompute, plus sending and receiving what
    crosses its cuts), subject to each device's memory: parameters,
    gradients, optimizer state and the activations the schedule keeps alive.
    `stages=manual:i,j,...` puts the cuts before layers i, j, ... instead
    (layers are the ops of @forward other than parameters and constants,
    numbered from 0).

    @forward then holds K gpipe.stage ops. Every tensor that crosses a cut
    is a stage result named "act:<n>" and an input of the next stage, passed
    on by the stages in between when its user is further on; graph inputs
    go straight to the stages that use them. Each stage carries its
    predicted time, FLOPs, parameter bytes and memory as attributes, and
    random dropouts are numbered across the whole model first, so that
    their streams do not depend on the cuts.
  }];
  let options = [
    Option<"deviceList", "devices", "std::string", "\"cpu:0\"",
           "Comma-separated devices, one stage each">,
    Option<"stages", "stages", "std::string", "\"auto\"",
           "auto, or manual:i,j,... (first layer of stages 1..K-1)">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step (activations alive under the schedule)">,
    Option<"schedule", "schedule", "std::string", "\"gpipe\"",
           "gpipe or 1f1b (activations alive per stage)">,
    Option<"recompute", "recompute", "std::string", "\"never\"",
           "never, always, except-last or auto (a stage recomputes only "
           "if keeping its activations does not fit its device)">,
    Option<"optimizerSlots", "optimizer-slots", "int64_t", "0",
           "Optimizer state tensors per parameter (1 for momentum, 2 for "
           "Adam)">,
    Option<"profile", "device-profile", "std::string", "\"\"",
           "JSON device profile (gpipe-opt --calibrate) for CPU devices">,
    Option<"costTable", "cost-table", "std::string", "\"\"",
           "CSV of measured per-op forward times (op,seconds)">,
    Option<"memoryPerDevice", "memory-per-device", "int64_t", "0",
           "Bytes of memory of each device (0: the profile's); a stage's "
           "plan may take what is left after the runtime's reserve">,
    Option<"deviceNames", "device-names", "std::string", "\"\"",
           "The devices as the user listed them, rank prefixes kept "
           "(r1:cpu:0), for messages; empty: as `devices` lists them">,
    Option<"inference", "inference", "bool", "false",
           "Cut for pipelined inference: a stage's time is its forward and "
           "its messages, its memory its parameters and one micro-batch's "
           "results (no loss, gradients or optimizer state)">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect", "::gpipe::GPipeDialect"];
}

def Schedule : Pass<"gpipe-schedule", "::mlir::ModuleOp"> {
  let summary = "Build the static per-device schedule of a training step";
  let description = [{
    For the K gpipe.stage ops of @forward, appends a gpipe.schedule with one
    gpipe.stream per stage: `gpipe` runs every micro-batch's forward, then
    the backwards in reverse order (fill, drain); `1f1b` runs K-1-k warm-up
    forwards on stage k, then alternates one forward and one backward, then
    drains. Transfers come right after the forward or backward that
    produces them and right before the one that consumes them; recompute
    comes before the backward of the stages that recompute; every stream
    ends with the optimizer step. Memory attributes of the stages
    (gpipe.static_bytes, gpipe.stash_bytes, gpipe.memory_limit) are copied
    to the streams so that the verifier can bound each device's memory.
  }];
  let options = [
    Option<"kind", "kind", "std::string", "\"gpipe\"", "gpipe or 1f1b">,
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "Micro-batches per step">,
    Option<"recompute", "recompute", "std::string", "\"never\"",
           "never, always, except-last or auto (each stage's "
           "gpipe.recomputes, as the partitioner chose)">,
  ];
}

def VerifySchedule : Pass<"gpipe-verify-schedule", "::mlir::ModuleOp"> {
  let summary = "Prove a schedule correct and report each device's peak";
  let description = [{
    Runs the gpipe.schedule verifier (matching transfers, no deadlock,
    structure, memory within each stream's limit) and annotates every
    stream with `peak_bytes`: its static bytes plus its stash bytes times
    the most micro-batches whose activations are alive at once in its
    instruction order. Emits one remark per stream.
  }];
}

def CollapseElementwiseLoops : Pass<"gpipe-collapse-elementwise-loops"> {
  let summary = "Run element-wise loops over several dimensions as one loop";
  let description = [{
    Each linalg.generic whose iterators are all parallel and whose body
    reads no index has its runs of consecutive dimensions that every
    operand indexes in the same order (or not at all) merged into one
    (upstream linalg dimension collapsing; on memrefs through
    memref.collapse_shape). A convolution's weights [O, I, 3, 3] then run
    as one loop of O*I*9 iterations that LLVM vectorizes, instead of an
    innermost loop of 3 that it unrolls into scalar code (the optimizer
    step of ResNet-18 took 25 ms on one core, an MLP's of half its
    parameters 1.3 ms). An input that broadcasts size-1 axes by constant
    indices (a global pool's gradient [N, C, 1, 1], an attention mask
    [1, 1, T, T]) is first read through a view without those axes, so
    that the axes it does not index merge too (the pool's gradient over
    [N, C, H, W] runs as N*C x H*W instead of an innermost loop of W).
    Each element is computed as before.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::tensor::TensorDialect"];
}

def OutlineParallelLoops : Pass<"gpipe-outline-parallel-loops",
                                "::mlir::ModuleOp"> {
  let summary = "Run large element-wise loops of stage code on all cores";
  let description = [{
    For every lowered stage function (gpipe.phase), each top-level
    element-wise linalg.generic on memrefs with at least `min-elements`
    iterations moves into a function of its own,
    `@<entry>_loop<k>(%arena, %params, %begin: index, %end: index)`, that
    re-creates the views it reads and writes and runs its loop nest with
    the outermost non-unit dimension restricted to [begin, end). The
    generic is replaced by `gpipe.parallel_for @<entry>_loop<k>(%ctx)
    extent N`, which the runtime splits across the device's cores. Each
    element is computed by the same code as before, so results do not
    depend on the number of cores.

    Left in place: generics with a reduction, with dynamic sizes, whose
    operands are not views of the arena or parameters, or that write a
    buffer they read through another indexing map (chunks would race).
    `%arena` and `%params` of the outlined function are `llvm.noalias`:
    they are distinct blocks and the body calls nothing.
  }];
  let options = [
    Option<"minElements", "min-elements", "int64_t", "32768",
           "Iterations below which a loop stays on the calling thread">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::func::FuncDialect",
                           "::gpipe::GPipeDialect"];
}

def TileTransposingLoops : Pass<"gpipe-tile-transposing-loops"> {
  let summary = "Run transposing parallel loops in cache-sized blocks";
  let description = [{
    An scf.parallel nest whose stores run along their buffers' innermost
    dimension by one loop and whose load runs along its buffer's innermost
    dimension by another (a transpose, or an element-wise op with a
    transposed operand, outlined by gpipe-outline-parallel-loops) is tiled
    (upstream scf::tileParallelLoop): the read dimension in blocks of one
    cache line's elements (`line-bytes`), the written one in blocks of
    `rows`, every other dimension one at a time outside them. Without it
    the innermost loop reads one element of a new line each iteration; when
    the source's rows are a multiple of 4 KiB apart (attention's heads:
    [T, B*H, D] to [B*H, D, T]) they fall in one level-1 set and every
    load misses (a ViT's key transpose ran at 8 GB/s, five times a copy's
    rate). Each element is computed by the same code as before.
  }];
  let options = [
    Option<"lineBytes", "line-bytes", "int64_t", "64",
           "Bytes of a cache line: the block along the read dimension">,
    Option<"rows", "rows", "int64_t", "8",
           "Lines of the source a block reads: the block along the "
           "written dimension (fewer than a level-1 cache's ways)">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect",
                           "::mlir::affine::AffineDialect"];
}

def LowerParallelForToLLVM : Pass<"gpipe-lower-parallel-for-to-llvm",
                                  "::mlir::ModuleOp"> {
  let summary = "Turn gpipe.parallel_for into a call of the runtime";
  let description = [{
    Runs after the stage code is in the LLVM dialect: each
    `gpipe.parallel_for @f(%ctx) extent N` becomes
    `llvm.call @gpipe_parallel_for(%ctx, addressof @f, N)`, the runtime's
    entry point of docs/bundle.md.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def BooleansAsBytes : Pass<"gpipe-booleans-as-bytes", "::mlir::ModuleOp"> {
  let summary = "Load and store i1 values of memory as the bytes they are";
  let description = [{
    Runs on stage code in the LLVM dialect. A boolean tensor element is
    one byte in memory (LLVM's layout of i1), and so it stays: each
    `llvm.load` of an i1 becomes a load of an i8 and a `llvm.trunc`, each
    `llvm.store` of an i1 a `llvm.zext` and a store of an i8, and each
    `llvm.getelementptr` over i1 elements one over i8 (the same byte
    offsets). LLVM's loop vectorizer does not widen accesses of a type
    whose store size is not its bit size: a loop that read a mask
    (`masked_fill` by a causal mask, 8 x 4 x 64 x 64 elements) ran a
    scalar select per element, 0.8 ns each, ten times its bytes' time.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

#endif // GPIPE_TRANSFORMS_PASSES
