//===- NNCost.cpp - FLOP counts of nn ops ---------------------------------===//
//
// CostOpInterface implementations. Bytes moved use the interface default
// (operands + results); FLOPs are op-specific where the default (one per
// output element) is wrong.
//
//===----------------------------------------------------------------------===//
#include "NN/IR/NNOps.h"

#include "gpipe/common/KernelFamily.h"
#include "gpipe/common/KernelKind.h"

using namespace mlir;
using namespace gpipe::nn;

int64_t gpipe::nn::detail::numElements(Type type) {
  auto shaped = llvm::dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 1;
  return shaped.getNumElements();
}

int64_t gpipe::nn::detail::numBytes(Type type) {
  auto shaped = llvm::dyn_cast<ShapedType>(type);
  if (!shaped)
    return 0;
  int64_t bits = shaped.getElementType().getIntOrFloatBitWidth();
  return numElements(type) * std::max<int64_t>(bits / 8, 1);
}

int64_t gpipe::nn::detail::defaultFlops(Operation *op) {
  int64_t flops = 0;
  for (Type t : op->getResultTypes())
    flops += numElements(t);
  return flops;
}

int64_t gpipe::nn::detail::defaultBytesMoved(Operation *op) {
  int64_t bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += numBytes(t);
  for (Type t : op->getResultTypes())
    bytes += numBytes(t);
  return bytes;
}

using gpipe::nn::detail::numElements;

namespace {
int64_t outputElements(Operation *op) {
  return numElements(op->getResult(0).getType());
}
} // namespace

int64_t CastOp::getFlops() { return 0; }
int64_t AddOp::getFlops() { return outputElements(*this); }
int64_t SubOp::getFlops() { return outputElements(*this); }
int64_t MulOp::getFlops() { return outputElements(*this); }
int64_t DivOp::getFlops() { return outputElements(*this); }
int64_t PowOp::getFlops() { return 4 * outputElements(*this); }
int64_t ModOp::getFlops() { return 2 * outputElements(*this); }
int64_t EqualOp::getFlops() { return outputElements(*this); }
int64_t LessOp::getFlops() { return outputElements(*this); }
int64_t LessEqualOp::getFlops() { return outputElements(*this); }
int64_t GreaterOp::getFlops() { return outputElements(*this); }
int64_t GreaterEqualOp::getFlops() { return outputElements(*this); }
int64_t AndOp::getFlops() { return outputElements(*this); }
int64_t OrOp::getFlops() { return outputElements(*this); }
int64_t XorOp::getFlops() { return outputElements(*this); }
int64_t WhereOp::getFlops() { return outputElements(*this); }

int64_t GemmOp::getFlops() {
  auto a = llvm::cast<RankedTensorType>(getA().getType());
  int64_t k = a.getDimSize(getTransA() ? 0 : 1);
  int64_t out = outputElements(*this);
  return 2 * out * k + (getC() ? 2 * out : 0);
}

int64_t MatMulOp::getFlops() {
  auto lhs = llvm::cast<RankedTensorType>(getLhs().getType());
  return 2 * outputElements(*this) * lhs.getShape().back();
}

int64_t AttentionOp::getFlops() {
  auto query = llvm::cast<RankedTensorType>(getQuery().getType());
  auto value = llvm::cast<RankedTensorType>(getValue().getType());
  int64_t tq = query.getShape().end()[-2], d = query.getShape().back();
  int64_t tk = value.getShape().end()[-2], dv = value.getShape().back();
  int64_t stack = numElements(query) / std::max<int64_t>(tq * d, 1);
  // The (query, key) pairs scored: a causal kernel skips the tiles whose
  // keys all come after their queries (tiles of attentionBlock). Each
  // pair: a product of D, one of Dv, and about 5 for the softmax
  // (maximum, exponential, sum, scaling).
  int64_t pairs = tq * tk;
  if (getCausal()) {
    pairs = 0;
    int64_t bq = std::max<int64_t>(attentionBlock(tq), 1),
            bk = std::max<int64_t>(attentionBlock(tk), 1);
    for (int64_t i0 = 0; i0 < tq; i0 += bq) {
      int64_t rows = std::min(bq, tq - i0);
      int64_t keys = std::min(tk, (i0 + rows + bk - 1) / bk * bk);
      pairs += rows * keys;
    }
  }
  return stack * pairs * (2 * d + 2 * dv + 5);
}

/// Whether an NC... shape's maps are one pixel (every spatial size 1).
static bool isOnePixel(ArrayRef<int64_t> shape) {
  return shape.size() > 2 &&
         llvm::all_of(shape.drop_front(2), [](int64_t d) { return d == 1; });
}

/// The (output position, kernel tap) pairs a convolution's kernel
/// multiplies, over every spatial axis (shapes NCHW and OIHW; -1 when a size
/// is not known). A map of one output pixel multiplies only the taps that
/// read the input, not its padding (a 3x3 kernel on a 1x1 map: its centre;
/// the CPU backend's one-pixel kernel, one product over those taps). Larger
/// maps multiply every tap that reads the input at some output position at
/// every position, zeros where it reads padding: oneDNN's direct kernels
/// compute the taps over the padding of small maps, and the CPU backend's
/// kernel for maps smaller than the kernel multiplies zero-padded patches
/// (ResNet-18's 3x3 convolutions on 2x2 maps, 16 images on one core: 0.84
/// ms measured, priced 0.29 by the taps that read the input and 0.50 by
/// these as dense convolutions).
static int64_t tapsMultiplied(ArrayRef<int64_t> input, ArrayRef<int64_t> output,
                              ArrayRef<int64_t> weight,
                              ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                              ArrayRef<int64_t> dilations) {
  size_t spatial = input.size() - 2;
  if (output.size() != input.size() || weight.size() != input.size() ||
      strides.size() != spatial || dilations.size() != spatial ||
      pads.size() != 2 * spatial)
    return -1;
  bool onePixel = isOnePixel(output);
  int64_t pairs = 1;
  for (size_t a = 0; a < spatial; ++a) {
    int64_t in = input[a + 2], out = output[a + 2], k = weight[a + 2];
    if (in < 0 || out < 0 || k < 0)
      return -1;
    int64_t count = 0;
    for (int64_t t = 0; t < k; ++t) {
      int64_t reads = 0;
      for (int64_t o = 0; o < out; ++o) {
        int64_t at = o * strides[a] - pads[a] + t * dilations[a];
        reads += at >= 0 && at < in;
      }
      count += onePixel ? reads : (reads > 0 ? out : 0);
    }
    pairs *= count;
  }
  return pairs;
}

/// 2 x batch x Cout x Cin/group x the (position, tap) pairs multiplied.
static int64_t convFlops(Type input, Type output, Type weight,
                         ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                         ArrayRef<int64_t> dilations) {
  auto in = llvm::cast<RankedTensorType>(input);
  auto out = llvm::cast<RankedTensorType>(output);
  auto w = llvm::cast<RankedTensorType>(weight);
  if (!w.hasStaticShape() || w.getDimSize(0) == 0)
    return 2 * gpipe::nn::detail::numElements(out);
  int64_t pairs = tapsMultiplied(in.getShape(), out.getShape(), w.getShape(),
                                 strides, pads, dilations);
  // Unknown sizes: every tap at every output position.
  if (pairs < 0 || out.isDynamicDim(0))
    return 2 * gpipe::nn::detail::numElements(out) *
           (w.getNumElements() / w.getDimSize(0));
  return 2 * out.getDimSize(0) * w.getDimSize(0) * w.getDimSize(1) * pairs;
}

int64_t ConvOp::getFlops() {
  int64_t out = outputElements(*this);
  return convFlops(getInput().getType(), getOutput().getType(),
                   getWeight().getType(), getStrides(), getPads(),
                   getDilations()) +
         (getBias() ? out : 0);
}

// The convolution whose input gradient this is, in the other direction.
int64_t ConvGradInputOp::getFlops() {
  return convFlops(getGradInput().getType(), getGradOutput().getType(),
                   getWeight().getType(), getStrides(), getPads(),
                   getDilations());
}

int64_t BatchNormOp::getFlops() { return 4 * outputElements(*this); }
int64_t LayerNormOp::getFlops() { return 8 * outputElements(*this); }
int64_t SoftmaxOp::getFlops() { return 5 * outputElements(*this); }
int64_t LogSoftmaxOp::getFlops() { return 5 * outputElements(*this); }
int64_t CumSumOp::getFlops() { return outputElements(*this); }

int64_t MaxPoolOp::getFlops() {
  int64_t window = 1;
  for (int64_t k : getKernelShape())
    window *= k;
  return outputElements(*this) * window;
}

int64_t AvgPoolOp::getFlops() {
  int64_t window = 1;
  for (int64_t k : getKernelShape())
    window *= k;
  return outputElements(*this) * window;
}

int64_t GlobalAvgPoolOp::getFlops() {
  return numElements(getInput().getType());
}

int64_t ReduceMeanOp::getFlops() { return numElements(getInput().getType()); }
int64_t BroadcastOp::getFlops() { return 0; }
int64_t ReduceSumOp::getFlops() { return numElements(getInput().getType()); }
int64_t SoftmaxCrossEntropyOp::getFlops() {
  return 5 * numElements(getLogits().getType());
}

// Pure data movement: no arithmetic.
int64_t PadOp::getFlops() { return 0; }
int64_t ReshapeOp::getFlops() { return 0; }
int64_t TransposeOp::getFlops() { return 0; }
int64_t ConcatOp::getFlops() { return 0; }
int64_t SliceOp::getFlops() { return 0; }
int64_t SplitOp::getFlops() { return 0; }
int64_t GatherOp::getFlops() { return 0; }
int64_t ConstantOp::getFlops() { return 0; }
int64_t DropoutOp::getFlops() { return 2 * numElements(getType()); }

// The kernel families of the forward ops (CostOpInterface).
StringRef WhereOp::getKernelFamily() { return "elementwise"; }
// A generated loop, but one that computes: calibrated on its own.
StringRef GeluOp::getKernelFamily() { return "gelu"; }
// Random dropout is a kernel drawing a number per element (its own fit);
// without randomness the identity, a generated loop.
StringRef DropoutOp::getKernelFamily() {
  return isRandom() ? "dropout" : "elementwise";
}
/// `family` in the compute type of `op`'s products: bfloat16 products are
/// kernels of their own ("matmul_bf16", priced by their own fits); a
/// convolution on small maps is oneDNN's there (the backend's own float32
/// kernel for them is left out), the backend's float32 loops of a narrow
/// first layer and the memory-bound depthwise kernels stay as they are.
static StringRef inComputeType(ComputeTypeOpInterface op, StringRef family) {
  if (op.getComputeType() != "bf16")
    return family;
  if (family == "small_map_conv")
    family = "conv";
  const gpipe::KernelFamily *f =
      gpipe::findKernelFamily((family + "_bf16").str());
  return f ? StringRef(f->name.data(), f->name.size()) : family;
}

/// Whether a product's result has fewer columns than one AVX-512 vector of
/// floats (a classifier's 10 classes): oneDNN's products of such shapes
/// ran at 15-30 GFLOP/s on a core whose wide ones reach 110, plus a fixed
/// cost several times a wide one's (stop 63's calibration: the conv nets'
/// 10-class heads took 3-6x the matmul family's fit, and pulled that fit
/// up for the small products of a Transformer's layers), so they are a
/// family of their own ("narrow_matmul"; a profile without it prices them
/// as matmul).
static bool hasNarrowColumns(Type result) {
  auto type = llvm::dyn_cast<RankedTensorType>(result);
  return type && type.getRank() >= 1 &&
         !type.isDynamicDim(type.getRank() - 1) && type.getShape().back() < 16;
}

StringRef GemmOp::getKernelFamily() {
  return inComputeType(*this, hasNarrowColumns(getResult().getType())
                                  ? "narrow_matmul"
                                  : "matmul");
}
// A product of stacks of matrices (attention's q k^T and its weights times
// v: many small products in one call) is a kernel of its own: per FLOP
// slower than a Linear layer's product of one weight matrix, and its
// gradients multiply transposed stacks. With narrow columns (the weights
// times v of heads of 8) another: its gradients multiply over an inner
// dimension of 8 (a GPT's heads of 8, the weights times v: 0.27 ms
// forward and backward on one core of a Zen 3 where the wide family's fit
// priced 0.16).
StringRef MatMulOp::getKernelFamily() {
  auto rhs = llvm::dyn_cast<RankedTensorType>(getRhs().getType());
  if (!rhs || rhs.getRank() <= 2)
    return inComputeType(*this, hasNarrowColumns(getResult().getType())
                                    ? "narrow_matmul"
                                    : "matmul");
  int64_t stack = 1;
  for (int64_t d : rhs.getShape().drop_back(2))
    stack *= d;
  if (stack == 1)
    return inComputeType(*this, "matmul");
  return inComputeType(*this, hasNarrowColumns(getResult().getType())
                                  ? "narrow_batched_matmul"
                                  : "batched_matmul");
}
// A depthwise convolution (a group per input channel) is a kernel of its
// own: memory-bound, a hundredth of a dense convolution's FLOPs.
// So is a 2-D convolution of few input channels, an image model's first
// layer (1 or 3 channels): oneDNN's kernels block channels by 8 or 16, and
// there ran at a fifth of their rate on dense layers (the main job's first
// layer, 1 channel in, 8 out: 1.44 ms forward and backward against 0.33
// priced as a dense convolution).
StringRef ConvOp::getKernelFamily() {
  auto input = cast<ShapedType>(getInput().getType());
  bool depthwise = getGroup() > 1 && input.hasRank() && input.getRank() > 1 &&
                   input.getDimSize(1) == getGroup();
  if (depthwise)
    return inComputeType(*this, "depthwise_conv");
  // The CPU backend's own loops (gpipe::isNarrowConv2d): at stride 1
  // without dilation only; a strided first layer (ResNet's 7x7 at stride
  // 2) is oneDNN's, a shallow convolution below.
  ArrayRef<int64_t> strides = getStrides(), dilations = getDilations();
  bool narrow =
      input.hasRank() && input.getRank() == 4 && !input.isDynamicDim(1) &&
      strides.size() == 2 && dilations.size() == 2 &&
      gpipe::isNarrowConv2d(input.getDimSize(1), getGroup(), strides[0],
                            strides[1], dilations[0], dilations[1]);
  if (narrow)
    return inComputeType(*this, "narrow_conv");
  // So is a 2-D convolution (one group) whose output maps are one pixel or
  // smaller than its kernel (ResNet-18's last blocks on small images: 3x3
  // kernels on 2x2 and 1x1 maps): the CPU backend runs it as one sgemm
  // over gathered patches, not oneDNN's direct kernel, and it reads
  // weights far larger than its maps (ResNet-18's 2x2 and 1x1
  // convolutions took 1.3-2.7x their time priced as dense ones).
  auto output = cast<ShapedType>(getOutput().getType());
  auto weight = cast<ShapedType>(getWeight().getType());
  if (getGroup() != 1 || !output.hasRank() || output.getRank() != 4 ||
      !weight.hasRank() || weight.getRank() != 4)
    return inComputeType(*this, "conv");
  bool onePixel = isOnePixel(output.getShape());
  bool smallerThanKernel = llvm::any_of(llvm::seq(2, 4), [&](int a) {
    return !output.isDynamicDim(a) && !weight.isDynamicDim(a) &&
           output.getDimSize(a) < weight.getDimSize(a);
  });
  if (onePixel || smallerThanKernel)
    return inComputeType(*this, "small_map_conv");
  // And so is one of fewer than 16 channels in or out (a small CNN's
  // second layer, 8 -> 16, or a bottleneck to 8): oneDNN blocks channels by
  // 16 floats, one AVX-512 vector, and leaves the rest of the vector idle
  // (measured on 14x14 maps: 8 -> 16, 32 -> 8 and 8 -> 8 took 1.3-2.5x
  // their time priced as dense ones, 16 -> 16 and 16 -> 32 within 12%).
  auto channels = [](ShapedType t) {
    return t.isDynamicDim(1) ? ShapedType::kDynamic : t.getDimSize(1);
  };
  auto few = [](int64_t c) { return c != ShapedType::kDynamic && c < 16; };
  return inComputeType(*this, few(channels(input)) || few(channels(output))
                                  ? "shallow_conv"
                                  : "conv");
}
// As a layer (a transposed convolution), the convolution's kernels.
StringRef ConvGradInputOp::getKernelFamily() {
  auto result = cast<ShapedType>(getGradInput().getType());
  bool depthwise = getGroup() > 1 && result.hasRank() && result.getRank() > 1 &&
                   result.getDimSize(1) == getGroup();
  return inComputeType(*this, depthwise ? "depthwise_conv" : "conv");
}
// Batch and layer normalization differ as kernels: per channel over the
// batch and the map (training statistics), per row over its features. The
// CPU's batch normalization loops a plane where a channel's map holds
// kBatchNormColumnsBelow elements or more, and runs smaller maps (1x1 and
// 2x2 maps, BatchNorm1d's [N, C]) along each sample's row over the
// channels: another kernel, "batch_norm_columns".
StringRef BatchNormOp::getKernelFamily() {
  auto type = cast<ShapedType>(getInput().getType());
  if (type.hasStaticShape() && type.getRank() >= 2) {
    int64_t perChannel = type.getDimSize(0) * type.getDimSize(1);
    if (perChannel > 0 &&
        type.getNumElements() / perChannel < gpipe::kBatchNormColumnsBelow)
      return "batch_norm_columns";
  }
  return "batch_norm";
}
StringRef LayerNormOp::getKernelFamily() { return "layer_norm"; }
StringRef SoftmaxOp::getKernelFamily() { return "softmax"; }
// Fused attention: tiles of products of stacks of matrices with the
// softmax between them, timed by its FLOPs (a profile calibrated before
// the family had its own fit prices it as batched_matmul); with dropout
// on its weights a family of its own (a random draw per weight, forward
// and backward; priced as attention where the profile has no fit).
StringRef AttentionOp::getKernelFamily() {
  return isRandom() ? "attention_dropout" : "attention";
}
StringRef CumSumOp::getKernelFamily() { return "elementwise"; }
StringRef LogSoftmaxOp::getKernelFamily() { return "softmax"; }
// 2-D max pooling is the CPU backend's own loop over plain maps (a pass
// or two over them), the other poolings oneDNN's between reorders to
// channel blocks: kernels of their own speeds.
StringRef MaxPoolOp::getKernelFamily() {
  auto input = llvm::dyn_cast<RankedTensorType>(getInput().getType());
  return input && input.getRank() == 4 ? "max_pool" : "pooling";
}
StringRef AvgPoolOp::getKernelFamily() { return "pooling"; }
StringRef GlobalAvgPoolOp::getKernelFamily() { return "pooling"; }
// Its gradient is the result's spread over each map: a broadcast (a
// generated loop, fused with the element-wise gradient before it) reading
// the result's gradient and writing the input's, as many bytes as the
// forward moves.
StringRef GlobalAvgPoolOp::getBackwardKernelFamily() { return "elementwise"; }
int64_t GlobalAvgPoolOp::getBackwardBytesMoved() { return getBytesMoved(); }
StringRef PadOp::getKernelFamily() { return "copy"; }
StringRef ReshapeOp::getKernelFamily() { return "copy"; }
StringRef TransposeOp::getKernelFamily() { return "copy"; }
StringRef ReduceMeanOp::getKernelFamily() { return "elementwise"; }
StringRef BroadcastOp::getKernelFamily() { return "copy"; }
StringRef ReduceSumOp::getKernelFamily() { return "elementwise"; }
StringRef SoftmaxCrossEntropyOp::getKernelFamily() { return "cross_entropy"; }
StringRef ConcatOp::getKernelFamily() { return "copy"; }
StringRef SliceOp::getKernelFamily() { return "copy"; }
StringRef SplitOp::getKernelFamily() { return "copy"; }
StringRef GatherOp::getKernelFamily() { return "copy"; }
StringRef ConstantOp::getKernelFamily() { return "copy"; }

// Bytes moved where they differ from the operands and results, and the
// gradients' bytes where they differ from twice the forward's.
using gpipe::nn::detail::numBytes;

// A reshape aliases its input (the lowering gives both one buffer), and
// so does its gradient.
int64_t ReshapeOp::getBytesMoved() { return 0; }
int64_t ReshapeOp::getBackwardBytesMoved() { return 0; }
// The gradient of a transpose is the inverse transpose.
int64_t TransposeOp::getBackwardBytesMoved() { return getBytesMoved(); }
/// Whether `slice` and the other users of its input, all unit-step slices
/// cutting one axis, lie side by side along it: the gradients autodiff
/// joins into one concatenation (mergeAdjacentZeroPads in
/// Transforms/Autodiff.cpp), an attention's q, k and v.
static bool joinsSiblingGradients(SliceOp slice) {
  Value input = slice.getInput();
  auto type = cast<RankedTensorType>(input.getType());
  int64_t rank = type.getRank(), axis = -1;
  SmallVector<SliceOp> siblings;
  for (Operation *user : input.getUsers()) {
    auto s = dyn_cast<SliceOp>(user);
    if (!s)
      return false;
    for (int64_t a = 0; a < rank; ++a) {
      if (s.getSteps()[a] != 1)
        return false;
      if (s.getStarts()[a] == 0 && s.getEnds()[a] >= type.getDimSize(a))
        continue; // the whole axis
      if (axis >= 0 && axis != a)
        return false;
      axis = a;
    }
    siblings.push_back(s);
  }
  if (axis < 0 || siblings.size() < 2)
    return false;
  SmallVector<std::pair<int64_t, int64_t>> spans;
  for (SliceOp s : siblings)
    spans.push_back({s.getStarts()[axis],
                     std::min(s.getEnds()[axis], type.getDimSize(axis))});
  llvm::sort(spans);
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first != spans[i - 1].second)
      return false;
  return true;
}

// A slice reads only what it copies; its gradient pads the result's
// gradient back to the input's shape (zeros written around it), except
// where autodiff joins it with its siblings' into one concatenation: then
// it reads and writes its own bytes (a ViT's q, k and v slices' gradients
// measured 2.3x faster than priced as three padded copies).
int64_t SliceOp::getBytesMoved() { return 2 * numBytes(getType()); }
// Its gradient is the interior of the result's: a slice, reading and
// writing the input's bytes.
int64_t PadOp::getBackwardBytesMoved() {
  return 2 * numBytes(getInput().getType());
}
int64_t SliceOp::getBackwardBytesMoved() {
  if (joinsSiblingGradients(*this))
    return 2 * numBytes(getType());
  return numBytes(getInput().getType()) + numBytes(getType());
}
// The gradients of a concatenation are slices of its result's, and that
// of a split the concatenation of its results': the forward's bytes.
int64_t ConcatOp::getBackwardBytesMoved() { return getBytesMoved(); }
int64_t SplitOp::getBackwardBytesMoved() { return getBytesMoved(); }
// Without randomness dropout is the identity and so is its gradient;
// with it, the gradient applies the regenerated mask once.
int64_t DropoutOp::getBackwardBytesMoved() {
  return isRandom() ? getBytesMoved() : 0;
}
// An addition passes its result's gradient to each operand of the
// result's shape; a broadcast operand's is a sum over the broadcast axes.
int64_t AddOp::getBackwardBytesMoved() {
  int64_t bytes = 0;
  for (Value operand : getOperands())
    if (operand.getType() != getType())
      bytes += numBytes(getType()) + numBytes(operand.getType());
  return bytes;
}

LogicalResult gpipe::nn::detail::verifyKernelFamilies(Operation *op) {
  auto cost = cast<CostOpInterface>(op);
  for (StringRef family :
       {cost.getKernelFamily(), cost.getBackwardKernelFamily()})
    if (!gpipe::findKernelFamily(family))
      return op->emitOpError("names kernel family '")
             << family
             << "', which common/'s kernel family table does not hold";
  return success();
}

bool gpipe::nn::detail::isComputeType(StringRef type) {
  return type == "f32" || type == "bf16";
}

LogicalResult gpipe::nn::detail::verifyComputeType(Operation *op) {
  StringRef type = cast<ComputeTypeOpInterface>(op).getComputeType();
  if (!isComputeType(type))
    return op->emitOpError("has compute_type '")
           << type << "'; expected \"f32\" or \"bf16\"";
  return success();
}
