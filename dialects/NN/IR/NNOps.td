//===- NNOps.td - The nn dialect ---------------------------*- tablegen -*-===//
//
// Tensor-level compute ops on ranked static tensors: the forward ops the ONNX
// importer produces and the gradient ops autodiff emits. Every forward op
// infers its result type (InferTypeOpInterface: that is the shape inference,
// and the verifier checks results against it) and reports its cost
// (CostOpInterface).
//
//===----------------------------------------------------------------------===//

#ifndef GPIPE_NN_OPS
#define GPIPE_NN_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "NN/IR/NNInterfaces.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::gpipe::nn";
  let summary = "Neural-network compute ops on static tensors";
  let description = [{
    Forward ops imported from ONNX and the gradient ops of reverse-mode
    autodiff. Tensors are ranked and statically shaped; broadcasting follows
    NumPy/ONNX rules.
  }];
  let usePropertiesForAttributes = 0;
}

class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, traits>;

defvar NN_Tensor = AnyRankedTensor;
defvar NN_IntArray = DenseI64ArrayAttr;

// A forward op: pure, type-inferring, with a cost.
// `costMethods`: the CostOpInterface methods it defines (the others keep
// their defaults: bytes of operands and results, the element-wise family).
class NN_ForwardOp<string mnemonic, list<Trait> traits = [],
                   list<string> costMethods = ["getFlops", "getKernelFamily"]>
    : NN_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor,
        DeclareOpInterfaceMethods<NN_CostOpInterface, costMethods>])> {
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

// One input, same shape and type out. `flopsPerElement` feeds the cost model.
class NN_UnaryOp<string mnemonic, int flopsPerElement = 1, list<Trait> traits = [],
                 list<string> costMethods = []>
    : NN_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType,
        DeclareOpInterfaceMethods<InferTypeOpInterface>,
        DeclareOpInterfaceMethods<NN_CostOpInterface,
                                  !listconcat(["getFlops"], costMethods)>,
        DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>])> {
  let results = (outs NN_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = [{
    int64_t $cppClass::getFlops() {
      return }] # flopsPerElement # [{ * ::gpipe::nn::detail::numElements(getType());
    }
  }];
}

def NN_ReluOp : NN_UnaryOp<"relu", 1,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "max(x, 0)";
  let arguments = (ins NN_Tensor:$input);
}
def NN_LeakyReluOp : NN_UnaryOp<"leaky_relu", 2,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "x if x >= 0 else alpha * x";
  let arguments = (ins NN_Tensor:$input, DefaultValuedAttr<F32Attr, "0.01">:$alpha);
}
def NN_NegOp : NN_UnaryOp<"neg", 1,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "-x";
  let arguments = (ins NN_Tensor:$input);
}
def NN_ClipOp : NN_UnaryOp<"clip", 2,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "min(max(x, min), max) (ReLU6, hardtanh)";
  let arguments = (ins NN_Tensor:$input, F32Attr:$min, F32Attr:$max);
}
def NN_HardSigmoidOp : NN_UnaryOp<"hard_sigmoid", 3,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "max(0, min(1, alpha * x + beta))";
  let arguments = (ins NN_Tensor:$input,
                   DefaultValuedAttr<F32Attr, "0.2">:$alpha,
                   DefaultValuedAttr<F32Attr, "0.5">:$beta);
}
def NN_HardSwishOp : NN_UnaryOp<"hard_swish", 4,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "x * min(max(x + 3, 0), 6) / 6";
  let arguments = (ins NN_Tensor:$input);
}
def NN_SigmoidOp : NN_UnaryOp<"sigmoid", 4,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "1 / (1 + exp(-x))";
  let arguments = (ins NN_Tensor:$input);
}
def NN_TanhOp : NN_UnaryOp<"tanh", 4,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "hyperbolic tangent";
  let arguments = (ins NN_Tensor:$input);
}
def NN_ErfOp : NN_UnaryOp<"erf", 8,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Gauss error function";
  let arguments = (ins NN_Tensor:$input);
}
def NN_SqrtOp : NN_UnaryOp<"sqrt", 2,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "square root";
  let arguments = (ins NN_Tensor:$input);
}
def NN_GeluOp : NN_UnaryOp<"gelu", 10,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>], ["getKernelFamily"]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `approximate` is "none" (x * Phi(x), with erf) or "tanh" (the tanh
    approximation). Its loops are the cost model's family "gelu": the
    polynomial of erf or tanh costs more than the bytes it moves.
  }];
  let arguments = (ins NN_Tensor:$input,
                   DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let hasVerifier = 1;
}
def NN_DropoutOp : NN_Op<"dropout", [Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<InferTypeOpInterface>,
    DeclareOpInterfaceMethods<NN_CostOpInterface,
        ["getFlops", "getBackwardBytesMoved", "getKernelFamily"]>,
    DeclareOpInterfaceMethods<NN_ElementwiseOpInterface, ["hasScalarForm"]>,
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Random zeroing with scaling 1/(1-ratio) when training";
  let description = [{
    In training, each element is kept with probability 1 - ratio and scaled
    by 1 / (1 - ratio); the keep decision of element i is a function of
    (seed, step, micro-batch, `stream`, i), so the backward regenerates the
    forward's mask. gpipe-autodiff numbers the streams. When `training` is
    false, or ratio is 0, the op is the identity.
  }];
  let arguments = (ins NN_Tensor:$input,
                   DefaultValuedAttr<F32Attr, "0.5">:$ratio,
                   DefaultValuedAttr<BoolAttr, "false">:$training,
                   OptionalAttr<I64Attr>:$stream);
  let results = (outs NN_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDeclaration = [{
    /// Training with a ratio above 0: draws random numbers.
    bool isRandom() { return getTraining() && !getRatio().isZero(); }
  }];
  let hasVerifier = 1;
}

def NN_CastOp : NN_Op<"cast", [Pure, SameOperandsAndResultShape,
    DeclareOpInterfaceMethods<NN_CostOpInterface, ["getFlops"]>,
    DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>,
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Element type conversion";
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($output)";
}

// Two inputs broadcast against each other (NumPy rules).
class NN_BinaryOp<string mnemonic, list<Trait> traits = [],
                  list<string> costMethods = ["getFlops"]>
    : NN_ForwardOp<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>]), costMethods> {
  let arguments = (ins NN_Tensor:$lhs, NN_Tensor:$rhs);
  let results = (outs NN_Tensor:$output);
}

def NN_AddOp : NN_BinaryOp<"add", [Commutative,
    DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getBackwardBytesMoved"]> { let summary = "lhs + rhs"; }
def NN_SubOp : NN_BinaryOp<"sub", [
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> { let summary = "lhs - rhs"; }
def NN_MulOp : NN_BinaryOp<"mul", [Commutative,
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> { let summary = "lhs * rhs"; }
def NN_DivOp : NN_BinaryOp<"div", [
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> { let summary = "lhs / rhs"; }
def NN_PowOp : NN_BinaryOp<"pow", [
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "lhs ** rhs (the exponent may have another element type)";
}

def NN_ModOp : NN_BinaryOp<"mod", [
    DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Remainder of lhs / rhs";
  let description = [{
    With `fmod` false (integers only, as ONNX Mod) the remainder takes the
    sign of the divisor (Python's %); with `fmod` true it takes the sign of
    the dividend (C's fmod; required for floats).
  }];
  let arguments = (ins NN_Tensor:$lhs, NN_Tensor:$rhs,
                   DefaultValuedAttr<BoolAttr, "false">:$fmod);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Comparison, logic and selection (attention masks). Comparisons and logic
// produce i1 tensors and pass no gradient; `where` routes the gradient to
// the operand each element was taken from.
//===----------------------------------------------------------------------===//

// Two operands of one element type broadcast against each other; i1 result.
class NN_CompareOp<string mnemonic, string symbol>
    : NN_BinaryOp<mnemonic, [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "lhs " # symbol # " rhs, element-wise (i1)";
}
def NN_EqualOp : NN_CompareOp<"equal", "==">;
def NN_LessOp : NN_CompareOp<"less", "<">;
def NN_LessEqualOp : NN_CompareOp<"less_equal", "<=">;
def NN_GreaterOp : NN_CompareOp<"greater", ">">;
def NN_GreaterEqualOp : NN_CompareOp<"greater_equal", ">=">;

// Boolean logic on i1 tensors (broadcast).
class NN_LogicalOp<string mnemonic, string symbol>
    : NN_BinaryOp<mnemonic, [Commutative,
        DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "lhs " # symbol # " rhs on i1 tensors";
}
def NN_AndOp : NN_LogicalOp<"and", "and">;
def NN_OrOp : NN_LogicalOp<"or", "or">;
def NN_XorOp : NN_LogicalOp<"xor", "xor">;
def NN_NotOp : NN_UnaryOp<"not", 1,
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "logical negation of an i1 tensor";
  let arguments = (ins NN_Tensor:$input);
  let hasVerifier = 1;
}

def NN_WhereOp : NN_ForwardOp<"where",
    [DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>,
     DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "x where condition else y (the three broadcast)";
  let description = [{
    `condition` is i1; `x` and `y` have one element type. Masked fills such
    as `scores.masked_fill(mask, -inf)` import as this op; the gradient of
    each branch is the output gradient where that branch was taken and
    exactly zero elsewhere.
  }];
  let arguments = (ins NN_Tensor:$condition, NN_Tensor:$x, NN_Tensor:$y);
  let results = (outs NN_Tensor:$output);
}

//===----------------------------------------------------------------------===//
// Linear algebra and convolution
//===----------------------------------------------------------------------===//

def NN_GemmOp : NN_ForwardOp<"gemm",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>, NN_ComputeTypeOpInterface]> {
  let summary = "alpha * op(a) * op(b) + beta * c, op = optional transpose";
  let arguments = (ins NN_Tensor:$a, NN_Tensor:$b, Optional<NN_Tensor>:$c,
                   DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                   DefaultValuedAttr<F32Attr, "1.0">:$beta,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                   DefaultValuedAttr<BoolAttr, "false">:$trans_b,
                   DefaultValuedStrAttr<StrAttr, "f32">:$compute_type);
  let results = (outs NN_Tensor:$output);
}

def NN_MatMulOp : NN_ForwardOp<"matmul",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>, NN_ComputeTypeOpInterface]> {
  let summary = "NumPy matmul with batch broadcasting";
  let arguments = (ins NN_Tensor:$lhs, NN_Tensor:$rhs,
                   DefaultValuedStrAttr<StrAttr, "f32">:$compute_type);
  let results = (outs NN_Tensor:$output);
}

def NN_ConvOp : NN_ForwardOp<"conv",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>, NN_ComputeTypeOpInterface]> {
  let summary = "N-d grouped convolution (NCHW, OIHW)";
  let description = [{
    `pads` holds the begin paddings of every spatial axis, then the end
    paddings; the importer resolves ONNX auto_pad into explicit pads.
  }];
  let arguments = (ins NN_Tensor:$input, NN_Tensor:$weight,
                   Optional<NN_Tensor>:$bias,
                   NN_IntArray:$strides, NN_IntArray:$pads,
                   NN_IntArray:$dilations,
                   DefaultValuedAttr<I64Attr, "1">:$group,
                   DefaultValuedStrAttr<StrAttr, "f32">:$compute_type);
  let results = (outs NN_Tensor:$output);
}

//===----------------------------------------------------------------------===//
// Normalization and softmax
//===----------------------------------------------------------------------===//

def NN_BatchNormOp : NN_ForwardOp<"batch_norm",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface,
                               ["isDifferentiableResult"]>]> {
  let summary = "Batch normalization over axis 1";
  let description = [{
    With `training`, normalizes with the statistics of the current
    (micro-)batch and the running statistics are updated with `momentum`
    (ONNX convention: running = momentum * running + (1 - momentum) * batch);
    otherwise normalizes with `mean` and `var`.

    `saved_mean` and `saved_var` (1-D, one per channel) are the statistics
    it normalized with: the batch's mean and biased variance when
    training, else `mean` and `var`. The gradient (batch_norm_grad) reads
    them instead of computing them again; they are not differentiated.
  }];
  let arguments = (ins NN_Tensor:$input, NN_Tensor:$scale, NN_Tensor:$bias,
                   NN_Tensor:$mean, NN_Tensor:$var,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon,
                   DefaultValuedAttr<F32Attr, "0.9">:$momentum,
                   DefaultValuedAttr<BoolAttr, "false">:$training);
  let results = (outs NN_Tensor:$output, NN_Tensor:$saved_mean,
                      NN_Tensor:$saved_var);
}

def NN_LayerNormOp : NN_ForwardOp<"layer_norm",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Normalization over the axes [axis, rank)";
  let arguments = (ins NN_Tensor:$input, NN_Tensor:$scale,
                   Optional<NN_Tensor>:$bias,
                   DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_Tensor:$output);
}

def NN_SoftmaxOp : NN_ForwardOp<"softmax",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "exp(x) / sum(exp(x)) along one axis";
  let arguments = (ins NN_Tensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs NN_Tensor:$output);
}

def NN_AttentionOp : NN_ForwardOp<"attention",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface,
                               ["isDifferentiableResult"]>]> {
  let summary = "softmax(scale * query key^T + mask) value, as one kernel";
  let description = [{
    Scaled dot-product attention over stacks of matrices: `query` is
    [..., Tq, D], `key` [..., Tk, D] and `value` [..., Tk, Dv] with the
    same leading dimensions (batch and heads); `output` is [..., Tq, Dv].
    `mask`, when present, is added to the scores and broadcasts to
    [..., Tq, Tk] (-inf where a position is masked out); with `causal`,
    query i sees keys j <= i only (Tq = Tk). gpipe-fuse-attention forms it
    from what exporters write (MatMul, scale, masked fill, Softmax,
    MatMul). The kernels never hold the Tq x Tk scores beyond a tile: the
    forward keeps `logsumexp` ([..., Tq], the log of each row's softmax
    denominator, with the scores' maximum; not differentiated), from which
    the backward (attention_grad) recomputes each tile's probabilities.

    With `dropout_ratio` above 0 the weights are dropped out as nn.dropout
    drops them when training (each kept with probability 1 - ratio and
    scaled by 1 / (1 - ratio); weight (i, j) of problem s decided by
    element (s Tq + i) Tk + j of the random stream `stream`, the mask an
    nn.dropout of the weights draws), before they multiply the values;
    evaluation runs without it. gpipe-autodiff numbers the streams (-1:
    not yet numbered).
  }];
  let arguments = (ins NN_Tensor:$query, NN_Tensor:$key, NN_Tensor:$value,
                   Optional<NN_Tensor>:$mask,
                   DefaultValuedAttr<F32Attr, "1.0">:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal,
                   DefaultValuedAttr<F32Attr, "0.0">:$dropout_ratio,
                   DefaultValuedAttr<I64Attr, "-1">:$stream);
  let results = (outs NN_Tensor:$output, NN_Tensor:$logsumexp);
  let extraClassDeclaration = [{
    /// Drops out its weights (training with a ratio above 0): draws
    /// random numbers.
    bool isRandom() { return !getDropoutRatio().isZero(); }
  }];
}

def NN_CumSumOp : NN_ForwardOp<"cumsum",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Running sum along one axis";
  let description = [{
    out[i] = sum of input[j] for j <= i along `axis` (j < i when `exclusive`;
    summed from the end when `reverse`), as ONNX CumSum. Integer (token
    types, positions from a padding mask) or float.
  }];
  let arguments = (ins NN_Tensor:$input, I64Attr:$axis,
                   DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                   DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs NN_Tensor:$output);
}

def NN_LogSoftmaxOp : NN_ForwardOp<"log_softmax",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "log(softmax(x)) along one axis";
  let arguments = (ins NN_Tensor:$input, DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs NN_Tensor:$output);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

def NN_MaxPoolOp : NN_ForwardOp<"max_pool",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "N-d max pooling (NC + spatial)";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$kernel_shape,
                   NN_IntArray:$strides, NN_IntArray:$pads,
                   NN_IntArray:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs NN_Tensor:$output);
}

def NN_AvgPoolOp : NN_ForwardOp<"avg_pool",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "N-d average pooling (NC + spatial)";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$kernel_shape,
                   NN_IntArray:$strides, NN_IntArray:$pads,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs NN_Tensor:$output);
}

def NN_GlobalAvgPoolOp : NN_ForwardOp<"global_avg_pool",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBackwardKernelFamily",
     "getBackwardBytesMoved"]> {
  let summary = "Mean over all spatial axes, kept as size 1";
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$output);
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

def NN_PadOp : NN_ForwardOp<"pad",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBackwardBytesMoved"]> {
  let summary = "Pad (or crop, with negative pads) every axis";
  let description = [{
    `pads` holds the begin amounts of every axis, then the end amounts.
    `mode` is "constant" (filled with `value`), "reflect" or "edge".
  }];
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$pads,
                   DefaultValuedStrAttr<StrAttr, "constant">:$mode,
                   DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs NN_Tensor:$output);
  // No pads: the input itself (torch.onnx writes one before an AvgPool2d
  // whose padding is 0).
  let hasFolder = 1;
}

def NN_ReshapeOp : NN_ForwardOp<"reshape",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBytesMoved", "getBackwardBytesMoved"]> {
  let summary = "Same elements, new static shape";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$shape);
  let results = (outs NN_Tensor:$output);
}

def NN_TransposeOp : NN_ForwardOp<"transpose",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBackwardBytesMoved"]> {
  let summary = "Permute axes: output axis i is input axis perm[i]";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$perm);
  let results = (outs NN_Tensor:$output);
}

def NN_ReduceMeanOp : NN_ForwardOp<"reduce_mean",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Mean over the given axes (sorted, non-negative)";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs NN_Tensor:$output);
}

def NN_BroadcastOp : NN_ForwardOp<"broadcast",
    [DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>,
     DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Repeat a tensor to a larger shape (NumPy broadcasting)";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$shape);
  let results = (outs NN_Tensor:$output);
}

def NN_ReduceSumOp : NN_ForwardOp<"reduce_sum",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Sum over the given axes (sorted, non-negative)";
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$axes,
                   DefaultValuedAttr<BoolAttr, "true">:$keepdims);
  let results = (outs NN_Tensor:$output);
}

def NN_SoftmaxCrossEntropyOp : NN_ForwardOp<"softmax_cross_entropy",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Mean over the batch of -log(softmax(logits))[label]";
  let description = [{
    `logits` is [N, C], `labels` [N] integer class indices in [0, C); the
    result is the scalar mean loss over the rows whose label is not
    `ignore_index` (PyTorch's CrossEntropyLoss, whose default is -100).
  }];
  let arguments = (ins NN_Tensor:$logits, NN_Tensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs NN_Tensor:$loss);
}

def NN_ConcatOp : NN_ForwardOp<"concat",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBackwardBytesMoved"]> {
  let summary = "Join tensors along one axis";
  let arguments = (ins Variadic<NN_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs NN_Tensor:$output);
}

def NN_SliceOp : NN_ForwardOp<"slice",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBytesMoved", "getBackwardBytesMoved"]> {
  let summary = "Strided slice; one start, end and step per axis";
  let description = [{
    `starts`, `ends` and `steps` have one entry per axis, already clamped
    to the input's shape as ONNX Slice prescribes (ends may be -1 for a
    negative step that runs to the front).
  }];
  let arguments = (ins NN_Tensor:$input, NN_IntArray:$starts,
                   NN_IntArray:$ends, NN_IntArray:$steps);
  let results = (outs NN_Tensor:$output);
}

def NN_SplitOp : NN_ForwardOp<"split",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>],
    ["getFlops", "getKernelFamily", "getBackwardBytesMoved"]> {
  let summary = "Cut a tensor along one axis into pieces of given sizes";
  let arguments = (ins NN_Tensor:$input, I64Attr:$axis, NN_IntArray:$sizes);
  let results = (outs Variadic<NN_Tensor>:$outputs);
}

def NN_GatherOp : NN_ForwardOp<"gather",
    [DeclareOpInterfaceMethods<NN_VJPOpInterface>]> {
  let summary = "Take slices along one axis at integer indices";
  let arguments = (ins NN_Tensor:$data, NN_Tensor:$indices, I64Attr:$axis);
  let results = (outs NN_Tensor:$output);
}

def NN_ConstantOp : NN_ForwardOp<"constant", [ConstantLike]> {
  let summary = "A tensor known at compile time";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_Tensor:$output);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Gradient ops (emitted by autodiff). Their result types are explicit; the
// verifiers check them against the forward shapes they mirror.
//===----------------------------------------------------------------------===//

class NN_GradOp<string mnemonic, list<Trait> traits = []>
    : NN_Op<mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<NN_CostOpInterface>])> {
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

// Also the forward of a transposed convolution (ONNX ConvTranspose): the
// input gradient of the convolution whose output has the transposed one's
// input shape. Its own gradient is a convolution (of the output gradient)
// and a weight gradient with the operands' roles exchanged.
def NN_ConvGradInputOp : NN_Op<"conv_grad_input", [Pure,
    DeclareOpInterfaceMethods<NN_CostOpInterface,
                              ["getFlops", "getKernelFamily"]>,
    DeclareOpInterfaceMethods<NN_VJPOpInterface>, NN_ComputeTypeOpInterface]> {
  let summary = "Gradient of conv with respect to its input";
  let description = [{
    The result type is explicit: a transposed convolution's output padding
    (rows past the last window) makes it larger than the convolution's
    shapes alone say.
  }];
  let assemblyFormat = [{
    operands attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$weight,
                   NN_IntArray:$strides, NN_IntArray:$pads,
                   NN_IntArray:$dilations, DefaultValuedAttr<I64Attr, "1">:$group,
                   DefaultValuedStrAttr<StrAttr, "f32">:$compute_type);
  let results = (outs NN_Tensor:$grad_input);
}

def NN_ConvGradWeightOp : NN_GradOp<"conv_grad_weight",
    [NN_ComputeTypeOpInterface]> {
  let summary = "Gradient of conv with respect to its weight";
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$input,
                   NN_IntArray:$strides, NN_IntArray:$pads,
                   NN_IntArray:$dilations, DefaultValuedAttr<I64Attr, "1">:$group,
                   DefaultValuedStrAttr<StrAttr, "f32">:$compute_type);
  let results = (outs NN_Tensor:$grad_weight);
}

def NN_MaxPoolGradOp : NN_GradOp<"max_pool_grad"> {
  let summary = "Gradient of max_pool: routed to each window's maximum";
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$input,
                   NN_IntArray:$kernel_shape, NN_IntArray:$strides,
                   NN_IntArray:$pads, NN_IntArray:$dilations,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode);
  let results = (outs NN_Tensor:$grad_input);
}

def NN_AvgPoolGradOp : NN_GradOp<"avg_pool_grad"> {
  let summary = "Gradient of avg_pool: spread evenly over each window";
  let arguments = (ins NN_Tensor:$grad_output, NN_IntArray:$kernel_shape,
                   NN_IntArray:$strides, NN_IntArray:$pads,
                   DefaultValuedAttr<BoolAttr, "false">:$ceil_mode,
                   DefaultValuedAttr<BoolAttr, "false">:$count_include_pad);
  let results = (outs NN_Tensor:$grad_input);
}

def NN_BatchNormGradOp : NN_GradOp<"batch_norm_grad"> {
  let summary = "Gradients of batch_norm for input, scale and bias";
  let description = [{
    `mean` and `var` are the statistics the forward normalized with (its
    `saved_mean` and `saved_var`); with `training` they are the batch's,
    which depend on the input, and the input gradient has the terms for
    that.
  }];
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$input,
                   NN_Tensor:$scale, NN_Tensor:$mean, NN_Tensor:$var,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon,
                   DefaultValuedAttr<BoolAttr, "true">:$training);
  let results = (outs NN_Tensor:$grad_input, NN_Tensor:$grad_scale,
                      NN_Tensor:$grad_bias);
}

def NN_LayerNormGradOp : NN_GradOp<"layer_norm_grad"> {
  let summary = "Gradients of layer_norm for input, scale and bias";
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$input,
                   NN_Tensor:$scale, DefaultValuedAttr<I64Attr, "-1">:$axis,
                   DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs NN_Tensor:$grad_input, NN_Tensor:$grad_scale,
                      NN_Tensor:$grad_bias);
}

def NN_SoftmaxGradOp : NN_GradOp<"softmax_grad"> {
  let summary = "Gradient of softmax given its output";
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$output,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs NN_Tensor:$grad_input);
}

def NN_AttentionGradOp : NN_GradOp<"attention_grad"> {
  let summary = "Gradients of attention for query, key and value";
  let description = [{
    From the output's gradient, the forward's operands, its `output` and
    its `logsumexp`: each tile's probabilities are recomputed (flash
    attention's backward), none of the Tq x Tk matrices is kept.
  }];
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$query,
                   NN_Tensor:$key, NN_Tensor:$value, NN_Tensor:$output,
                   NN_Tensor:$logsumexp, Optional<NN_Tensor>:$mask,
                   DefaultValuedAttr<F32Attr, "1.0">:$scale,
                   DefaultValuedAttr<BoolAttr, "false">:$causal,
                   DefaultValuedAttr<F32Attr, "0.0">:$dropout_ratio,
                   DefaultValuedAttr<I64Attr, "-1">:$stream);
  let results = (outs NN_Tensor:$grad_query, NN_Tensor:$grad_key,
                      NN_Tensor:$grad_value);
}

def NN_LogSoftmaxGradOp : NN_GradOp<"log_softmax_grad"> {
  let summary = "Gradient of log_softmax given its output";
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$output,
                   DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs NN_Tensor:$grad_input);
}

// Element-wise derivative of an activation, applied to the forward input.
// `extraArgs`: the forward's attributes the derivative needs. One verifier
// for all: the gradient and the input have the same type.
class NN_ActivationGradOp<string mnemonic, dag extraArgs = (ins)>
    : NN_GradOp<mnemonic,
        [DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>]> {
  let arguments = !con((ins NN_Tensor:$grad_output, NN_Tensor:$input),
                       extraArgs);
  let results = (outs NN_Tensor:$grad_input);
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::verify() {
      return verifySameType(*this, getGradOutput(), getInput(),
                            "grad_output and input");
    }
  }];
}
def NN_ReluGradOp : NN_ActivationGradOp<"relu_grad"> {
  let summary = "grad * (input > 0)";
}
def NN_GatherGradOp : NN_GradOp<"gather_grad"> {
  let summary = "Gradient of gather with respect to its data (scatter-add)";
  let description = [{
    A zero tensor of the data's shape (the result type) with the gradient
    of each gathered slice added at its index; indices that repeat (a token
    that occurs twice) add up. The gradient of an embedding table.
  }];
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$indices,
                   I64Attr:$axis);
  let results = (outs NN_Tensor:$grad_data);
}
def NN_ClipGradOp : NN_ActivationGradOp<"clip_grad",
    (ins F32Attr:$min, F32Attr:$max)> {
  let summary = "grad where min < input < max, else 0 (PyTorch's hardtanh)";
}
def NN_HardSigmoidGradOp : NN_ActivationGradOp<"hard_sigmoid_grad",
    (ins DefaultValuedAttr<F32Attr, "0.2">:$alpha,
         DefaultValuedAttr<F32Attr, "0.5">:$beta)> {
  let summary = "alpha * grad where 0 < alpha * input + beta < 1, else 0";
}
def NN_HardSwishGradOp : NN_ActivationGradOp<"hard_swish_grad"> {
  let summary = "0 if input < -3, grad * (input / 3 + 0.5) if input <= 3, "
                "else grad (PyTorch's hardswish)";
}
def NN_LeakyReluGradOp : NN_ActivationGradOp<"leaky_relu_grad",
    (ins DefaultValuedAttr<F32Attr, "0.01">:$alpha)> {
  let summary = "grad if input > 0 else alpha * grad (as PyTorch)";
}

def NN_SoftmaxCrossEntropyGradOp : NN_GradOp<"softmax_cross_entropy_grad"> {
  let summary = "grad_loss * (softmax(logits) - onehot(labels)) / count, "
                "zero on rows labelled ignore_index";
  let arguments = (ins NN_Tensor:$grad_loss, NN_Tensor:$logits,
                   NN_Tensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs NN_Tensor:$grad_logits);
}
def NN_GeluGradOp : NN_GradOp<"gelu_grad",
    [DeclareOpInterfaceMethods<NN_ElementwiseOpInterface>]> {
  let summary = "grad * gelu'(input), for either form of gelu";
  let arguments = (ins NN_Tensor:$grad_output, NN_Tensor:$input,
                   DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs NN_Tensor:$grad_input);
}
def NN_DropoutGradOp : NN_GradOp<"dropout_grad"> {
  let summary = "grad * mask / (1 - ratio), the mask of the dropout of `stream`";
  let arguments = (ins NN_Tensor:$grad_output, F32Attr:$ratio, I64Attr:$stream);
  let results = (outs NN_Tensor:$grad_input);
}
def NN_ErfGradOp : NN_ActivationGradOp<"erf_grad"> {
  let summary = "grad * 2 / sqrt(pi) * exp(-input^2)";
}

#endif // GPIPE_NN_OPS
