// oneDNN primitives for the kernel kinds of the stage code (docs/bundle.md).
#include "gpipe/runtime/Kernels.h"

#include "gpipe/runtime/ParallelFor.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

namespace gpipe::runtime {

using dnnl::memory;
using dims = memory::dims;

namespace {

[[noreturn]] void unsupported(const KernelSpec &spec, const std::string &why) {
  throw BundleError("kernel " + std::to_string(spec.id) + " (" + spec.kind +
                    "): " + why);
}

dims rowMajorStrides(const dims &shape) {
  dims strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  return strides;
}

memory::desc plainDesc(const dims &shape) {
  return memory::desc(shape, memory::data_type::f32, rowMajorStrides(shape));
}

void *address(const TensorSlot &slot, const KernelMemory &mem) {
  return (slot.space == "params" ? mem.params : mem.arena) + slot.offset;
}

/// A oneDNN memory over a tensor of the stage, optionally viewed with other
/// dims (same element count, row-major).
memory bindSlot(const KernelSpec &spec, const TensorSlot &slot,
                const KernelMemory &mem, dnnl::engine &engine,
                const dims &shape = {}) {
  if (slot.dtype != DType::F32)
    unsupported(spec, "element type " + std::string(dtypeName(slot.dtype)) +
                          " (only float32 kernels are implemented)");
  dims d = shape.empty() ? dims(slot.shape) : shape;
  return memory(plainDesc(d), engine, address(slot, mem));
}

/// `m`'s dims with the layout left to the primitive (oneDNN's blocked ones).
memory::desc anyLayout(const memory &m) {
  return memory::desc(m.get_desc().dims(), memory::data_type::f32,
                      memory::format_tag::any);
}

/// Zeros in the layout of a normalization's scale/shift: the shift changes
/// neither the statistics nor the gradients, and stands in for the one a
/// backward primitive asks for.
memory zeroShift(const memory::desc &desc, dnnl::engine &engine) {
  memory shift(desc, engine);
  std::memset(shift.get_data_handle(), 0, desc.get_size());
  return shift;
}

/// A primitive with its arguments, run as is.
class PrimitiveKernel : public Kernel {
public:
  PrimitiveKernel(dnnl::primitive primitive,
                  std::unordered_map<int, memory> args,
                  std::function<void()> epilogue = nullptr)
      : primitive(std::move(primitive)), args(std::move(args)),
        epilogue(std::move(epilogue)) {}
  void run(dnnl::stream &stream) override {
    primitive.execute(stream, args);
    stream.wait();
    if (epilogue)
      epilogue();
  }

private:
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  std::function<void()> epilogue;
};

/// Right-aligns `shape` to `rank` dims with leading 1s.
dims padLeft(const std::vector<int64_t> &shape, size_t rank) {
  dims d(rank - shape.size(), 1);
  d.insert(d.end(), shape.begin(), shape.end());
  return d;
}

std::unique_ptr<Kernel> createMatmul(const KernelSpec &spec,
                                     const KernelMemory &mem,
                                     dnnl::engine &engine) {
  const TensorSlot &a = spec.operands.at(0), &b = spec.operands.at(1);
  const TensorSlot &out = spec.results.at(0);
  std::vector<int64_t> l = a.shape, r = b.shape;
  if (l.size() == 1)
    l.insert(l.begin(), 1);
  if (r.size() == 1)
    r.push_back(1);
  size_t rank = std::max(l.size(), r.size());
  dims ld = padLeft(l, rank), rd = padLeft(r, rank), od(rank);
  for (size_t i = 0; i + 2 < rank; ++i)
    od[i] = std::max(ld[i], rd[i]);
  od[rank - 2] = ld[rank - 2];
  od[rank - 1] = rd[rank - 1];
  memory src = bindSlot(spec, a, mem, engine, ld);
  memory weights = bindSlot(spec, b, mem, engine, rd);
  memory dst = bindSlot(spec, out, mem, engine, od);
  dnnl::matmul::desc desc(src.get_desc(), weights.get_desc(), dst.get_desc());
  dnnl::matmul::primitive_desc pd(desc, engine);
  return std::make_unique<PrimitiveKernel>(
      dnnl::matmul(pd),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_WEIGHTS, weights},
                                      {DNNL_ARG_DST, dst}});
}

std::unique_ptr<Kernel> createGemm(const KernelSpec &spec,
                                   const KernelMemory &mem,
                                   dnnl::engine &engine) {
  const TensorSlot &a = spec.operands.at(0), &b = spec.operands.at(1);
  const TensorSlot &out = spec.results.at(0);
  bool transA = spec.number("trans_a", 0) != 0;
  bool transB = spec.number("trans_b", 0) != 0;
  float alpha = static_cast<float>(spec.number("alpha", 1.0));
  float beta = static_cast<float>(spec.number("beta", 1.0));
  int64_t m = out.shape.at(0), n = out.shape.at(1);
  int64_t k = transA ? a.shape.at(0) : a.shape.at(1);
  // Transposed operands are read in place through their strides.
  memory::desc srcDesc(dims{m, k}, memory::data_type::f32,
                       transA ? dims{1, m} : dims{k, 1});
  memory::desc weightsDesc(dims{k, n}, memory::data_type::f32,
                           transB ? dims{1, k} : dims{n, 1});
  memory src(srcDesc, engine, address(a, mem));
  memory weights(weightsDesc, engine, address(b, mem));
  memory dst = bindSlot(spec, out, mem, engine);
  if (a.dtype != DType::F32 || b.dtype != DType::F32)
    unsupported(spec, "only float32 kernels are implemented");
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  bool hasC = spec.operands.size() > 2;
  if (hasC && spec.operands[2].dtype != DType::F32)
    unsupported(spec, "only float32 kernels are implemented");
  if (hasC && alpha == 1.0f && beta == 1.0f) {
    // The common case: C is a bias added by the primitive.
    const TensorSlot &c = spec.operands[2];
    memory bias = bindSlot(spec, c, mem, engine, padLeft(c.shape, 2));
    dnnl::matmul::desc desc(srcDesc, weightsDesc, bias.get_desc(),
                            dst.get_desc());
    dnnl::matmul::primitive_desc pd(desc, engine);
    args[DNNL_ARG_BIAS] = bias;
    return std::make_unique<PrimitiveKernel>(dnnl::matmul(pd), args);
  }
  dnnl::matmul::desc desc(srcDesc, weightsDesc, dst.get_desc());
  dnnl::matmul::primitive_desc pd(desc, engine);
  std::function<void()> epilogue;
  if (alpha != 1.0f || hasC) {
    float *d = static_cast<float *>(address(out, mem));
    const float *c =
        hasC ? static_cast<const float *>(address(spec.operands[2], mem))
             : nullptr;
    dims cShape = hasC ? padLeft(spec.operands[2].shape, 2) : dims{1, 1};
    epilogue = [=] {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float v = alpha * d[i * n + j];
          if (c)
            v += beta * c[(cShape[0] == 1 ? 0 : i) * cShape[1] +
                          (cShape[1] == 1 ? 0 : j)];
          d[i * n + j] = v;
        }
    };
  }
  return std::make_unique<PrimitiveKernel>(dnnl::matmul(pd), args, epilogue);
}

/// A primitive that works in the layouts it chose (blocked, for speed):
/// plain tensors of the arena are reordered into them before it runs and
/// its results back after.
class ReorderedKernel : public Kernel {
public:
  ReorderedKernel(dnnl::primitive primitive, dnnl::engine &engine)
      : primitive(std::move(primitive)), engine(engine) {}
  /// Binds `arg` to `plain`, through a buffer of layout `chosen` if it
  /// differs; `output` arguments are copied back to `plain` after a run. A
  /// `constant` input (inference weights) is reordered on the first run
  /// only.
  void bind(int arg, const memory &plain, const memory::desc &chosen,
            bool output, bool constant = false) {
    if (plain.get_desc() == chosen) {
      args[arg] = plain;
      return;
    }
    memory inner(chosen, engine);
    args[arg] = inner;
    if (output)
      after.push_back({inner, plain});
    else
      (constant ? once : before).push_back({plain, inner});
  }
  void run(dnnl::stream &stream) override {
    for (auto &[from, to] : once)
      dnnl::reorder(from, to).execute(stream, from, to);
    once.clear();
    for (auto &[from, to] : before)
      dnnl::reorder(from, to).execute(stream, from, to);
    primitive.execute(stream, args);
    for (auto &[from, to] : after)
      dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
  }

private:
  dnnl::primitive primitive;
  dnnl::engine &engine;
  std::unordered_map<int, memory> args;
  std::vector<std::pair<memory, memory>> once, before, after;
};

/// Convolution geometry shared by the forward and backward kernels.
struct ConvGeometry {
  dims strides, dilations, padL, padR, weightDims;
};

ConvGeometry convGeometry(const KernelSpec &spec, const TensorSlot &data,
                          const TensorSlot &weight) {
  ConvGeometry g;
  int64_t group = static_cast<int64_t>(spec.number("group", 1));
  std::vector<int64_t> s = spec.ints("strides"), p = spec.ints("pads"),
                       d = spec.ints("dilations");
  size_t spatial = data.shape.size() - 2;
  g.strides.assign(s.begin(), s.end());
  g.padL.assign(p.begin(), p.begin() + spatial);
  g.padR.assign(p.begin() + spatial, p.end());
  for (int64_t v : d)
    g.dilations.push_back(v - 1);
  g.weightDims = weight.shape;
  if (group > 1) {
    g.weightDims.insert(g.weightDims.begin(), group);
    g.weightDims[1] /= group;
  }
  return g;
}

std::unique_ptr<Kernel> createConv(const KernelSpec &spec,
                                   const KernelMemory &mem,
                                   dnnl::engine &engine) {
  const TensorSlot &x = spec.operands.at(0), &w = spec.operands.at(1);
  ConvGeometry g = convGeometry(spec, x, w);
  memory src = bindSlot(spec, x, mem, engine);
  memory weights = bindSlot(spec, w, mem, engine, g.weightDims);
  memory dst = bindSlot(spec, spec.results.at(0), mem, engine);
  std::optional<memory> bias;
  if (spec.operands.size() > 2)
    bias = bindSlot(spec, spec.operands[2], mem, engine);
  auto desc = bias ? dnnl::convolution_forward::desc(
                         dnnl::prop_kind::forward_inference,
                         dnnl::algorithm::convolution_direct, anyLayout(src),
                         anyLayout(weights), bias->get_desc(), anyLayout(dst),
                         g.strides, g.dilations, g.padL, g.padR)
                   : dnnl::convolution_forward::desc(
                         dnnl::prop_kind::forward_inference,
                         dnnl::algorithm::convolution_direct, anyLayout(src),
                         anyLayout(weights), anyLayout(dst), g.strides,
                         g.dilations, g.padL, g.padR);
  dnnl::convolution_forward::primitive_desc pd(desc, engine);
  auto kernel =
      std::make_unique<ReorderedKernel>(dnnl::convolution_forward(pd), engine);
  kernel->bind(DNNL_ARG_SRC, src, pd.src_desc(), false);
  // Weights change between runs only when training.
  kernel->bind(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false,
               mem.constantParams);
  if (bias)
    kernel->bind(DNNL_ARG_BIAS, *bias, bias->get_desc(), false);
  kernel->bind(DNNL_ARG_DST, dst, pd.dst_desc(), true);
  return kernel;
}

std::unique_ptr<Kernel> createPool(const KernelSpec &spec,
                                   const KernelMemory &mem,
                                   dnnl::engine &engine) {
  const TensorSlot &x = spec.operands.at(0), &out = spec.results.at(0);
  size_t spatial = x.shape.size() - 2;
  dims kernel, strides, padL, padR, dil;
  dnnl::algorithm algorithm = dnnl::algorithm::pooling_max;
  if (spec.kind == "global_avg_pool") {
    kernel.assign(x.shape.begin() + 2, x.shape.end());
    strides.assign(spatial, 1);
    padL.assign(spatial, 0);
    padR.assign(spatial, 0);
    dil.assign(spatial, 0);
    algorithm = dnnl::algorithm::pooling_avg_include_padding;
  } else {
    std::vector<int64_t> k = spec.ints("kernel_shape"),
                         s = spec.ints("strides"), p = spec.ints("pads"),
                         d = spec.ints("dilations");
    if (d.empty())
      d.assign(spatial, 1);
    kernel.assign(k.begin(), k.end());
    strides.assign(s.begin(), s.end());
    padL.assign(p.begin(), p.begin() + spatial);
    for (size_t i = 0; i < spatial; ++i) {
      dil.push_back(d[i] - 1);
      // ceil_mode windows run past the end: widen the right padding to
      // reach the planned output size.
      int64_t extent = (k[i] - 1) * d[i] + 1;
      padR.push_back((out.shape[i + 2] - 1) * s[i] + extent - x.shape[i + 2] -
                     p[i]);
    }
    if (spec.kind == "avg_pool")
      algorithm = spec.number("count_include_pad", 0) != 0
                      ? dnnl::algorithm::pooling_avg_include_padding
                      : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  memory src = bindSlot(spec, x, mem, engine);
  memory dst = bindSlot(spec, out, mem, engine);
  dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference,
                                      algorithm, src.get_desc(), dst.get_desc(),
                                      strides, kernel, dil, padL, padR);
  return std::make_unique<PrimitiveKernel>(
      dnnl::pooling_v2_forward(
          dnnl::pooling_v2_forward::primitive_desc(desc, engine)),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_DST, dst}});
}

/// BatchNorm of a training bundle. On training steps: oneDNN forward
/// training with the batch's statistics, written to the op's saved_mean and
/// saved_var results (the gradient reads them), then the running statistics
/// move towards them (running = momentum * running + (1 - momentum) * batch,
/// the variance unbiased as PyTorch keeps it). While evaluating (state updates
/// off): the running statistics, as inference does. A forward recomputed by
/// the backward phase (no update flag) uses the batch's statistics and
/// leaves the running ones alone.
class BatchNormTrainingKernel : public Kernel {
public:
  BatchNormTrainingKernel(dnnl::batch_normalization_forward::primitive_desc pd,
                          std::unordered_map<int, memory> args,
                          dnnl::batch_normalization_forward evaluation,
                          std::unordered_map<int, memory> evaluationArgs,
                          float *runningMean, float *runningVar, float momentum,
                          int64_t perChannel, const bool *update)
      : primitive(pd), args(std::move(args)), evaluation(std::move(evaluation)),
        evaluationArgs(std::move(evaluationArgs)), runningMean(runningMean),
        runningVar(runningVar), momentum(momentum), perChannel(perChannel),
        update(update) {}
  void run(dnnl::stream &stream) override {
    if (update && !*update) {
      evaluation.execute(stream, evaluationArgs);
      stream.wait();
      return;
    }
    primitive.execute(stream, args);
    stream.wait();
    if (!update)
      return;
    const float *mean =
        static_cast<float *>(args[DNNL_ARG_MEAN].get_data_handle());
    const float *var =
        static_cast<float *>(args[DNNL_ARG_VARIANCE].get_data_handle());
    size_t channels = args[DNNL_ARG_MEAN].get_desc().get_size() / sizeof(float);
    float unbias = perChannel > 1 ? static_cast<float>(perChannel) /
                                        static_cast<float>(perChannel - 1)
                                  : 1.0f;
    for (size_t c = 0; c < channels; ++c) {
      runningMean[c] = momentum * runningMean[c] + (1 - momentum) * mean[c];
      runningVar[c] =
          momentum * runningVar[c] + (1 - momentum) * var[c] * unbias;
    }
  }

private:
  dnnl::batch_normalization_forward primitive;
  std::unordered_map<int, memory> args;
  dnnl::batch_normalization_forward evaluation;
  std::unordered_map<int, memory> evaluationArgs;
  float *runningMean, *runningVar;
  float momentum;
  int64_t perChannel;
  const bool *update;
};

std::unique_ptr<Kernel> createBatchNorm(const KernelSpec &spec,
                                        const KernelMemory &mem,
                                        dnnl::engine &engine) {
  memory src = bindSlot(spec, spec.operands.at(0), mem, engine);
  memory dst = bindSlot(spec, spec.results.at(0), mem, engine);
  float epsilon = static_cast<float>(spec.number("epsilon", 1e-5));
  auto scaleShift = dnnl::normalization_flags::use_scale |
                    dnnl::normalization_flags::use_shift;
  if (spec.number("training", 0) != 0) {
    dnnl::batch_normalization_forward::desc desc(
        dnnl::prop_kind::forward_training, src.get_desc(), epsilon, scaleShift);
    dnnl::batch_normalization_forward::primitive_desc pd(desc, engine);
    int64_t perChannel = spec.operands[0].numElements() /
                         std::max<int64_t>(spec.operands[0].shape.at(1), 1);
    memory scale = bindSlot(spec, spec.operands.at(1), mem, engine);
    memory shift = bindSlot(spec, spec.operands.at(2), mem, engine);
    if (spec.results.size() != 3)
      unsupported(spec, "a training batch_norm needs its saved_mean and "
                        "saved_var results");
    memory savedMean = bindSlot(spec, spec.results[1], mem, engine);
    memory savedVar = bindSlot(spec, spec.results[2], mem, engine);
    if (savedMean.get_desc().get_size() != pd.mean_desc().get_size() ||
        savedVar.get_desc().get_size() != pd.variance_desc().get_size())
      unsupported(spec, "saved_mean and saved_var must hold one value per "
                        "channel");
    dnnl::batch_normalization_forward::desc evalDesc(
        dnnl::prop_kind::forward_inference, src.get_desc(), epsilon,
        dnnl::normalization_flags::use_global_stats | scaleShift);
    return std::make_unique<BatchNormTrainingKernel>(
        pd,
        std::unordered_map<int, memory>{
            {DNNL_ARG_SRC, src},
            {DNNL_ARG_SCALE, scale},
            {DNNL_ARG_SHIFT, shift},
            {DNNL_ARG_MEAN,
             memory(pd.mean_desc(), engine, savedMean.get_data_handle())},
            {DNNL_ARG_VARIANCE,
             memory(pd.variance_desc(), engine, savedVar.get_data_handle())},
            {DNNL_ARG_DST, dst}},
        dnnl::batch_normalization_forward(
            dnnl::batch_normalization_forward::primitive_desc(evalDesc,
                                                              engine)),
        std::unordered_map<int, memory>{
            {DNNL_ARG_SRC, src},
            {DNNL_ARG_SCALE, scale},
            {DNNL_ARG_SHIFT, shift},
            {DNNL_ARG_MEAN, bindSlot(spec, spec.operands.at(3), mem, engine)},
            {DNNL_ARG_VARIANCE,
             bindSlot(spec, spec.operands.at(4), mem, engine)},
            {DNNL_ARG_DST, dst}},
        static_cast<float *>(address(spec.operands.at(3), mem)),
        static_cast<float *>(address(spec.operands.at(4), mem)),
        static_cast<float>(spec.number("momentum", 0.9)), perChannel,
        // A forward recomputed by the backward phase (--recompute) has
        // already updated the running statistics in the forward phase.
        spec.strings.count("gpipe.recompute") ? nullptr : mem.updateState);
  }
  dnnl::batch_normalization_forward::desc desc(
      dnnl::prop_kind::forward_inference, src.get_desc(), epsilon,
      dnnl::normalization_flags::use_global_stats | scaleShift);
  return std::make_unique<PrimitiveKernel>(
      dnnl::batch_normalization_forward(
          dnnl::batch_normalization_forward::primitive_desc(desc, engine)),
      std::unordered_map<int, memory>{
          {DNNL_ARG_SRC, src},
          {DNNL_ARG_SCALE, bindSlot(spec, spec.operands.at(1), mem, engine)},
          {DNNL_ARG_SHIFT, bindSlot(spec, spec.operands.at(2), mem, engine)},
          {DNNL_ARG_MEAN, bindSlot(spec, spec.operands.at(3), mem, engine)},
          {DNNL_ARG_VARIANCE, bindSlot(spec, spec.operands.at(4), mem, engine)},
          {DNNL_ARG_DST, dst}});
}

/// BatchNorm backward: gradients for input, scale and shift, from the
/// statistics the forward normalized with (its saved_mean and saved_var,
/// operands 3 and 4): the batch's when training, which then also
/// differentiates through them.
std::unique_ptr<Kernel> createBatchNormGrad(const KernelSpec &spec,
                                            const KernelMemory &mem,
                                            dnnl::engine &engine) {
  memory gradOut = bindSlot(spec, spec.operands.at(0), mem, engine);
  memory src = bindSlot(spec, spec.operands.at(1), mem, engine);
  memory scale = bindSlot(spec, spec.operands.at(2), mem, engine);
  memory gradIn = bindSlot(spec, spec.results.at(0), mem, engine);
  memory gradScale = bindSlot(spec, spec.results.at(1), mem, engine);
  memory gradShift = bindSlot(spec, spec.results.at(2), mem, engine);
  float epsilon = static_cast<float>(spec.number("epsilon", 1e-5));
  bool training = spec.number("training", 1) != 0;
  auto flags = dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  if (!training)
    flags = flags | dnnl::normalization_flags::use_global_stats;
  dnnl::batch_normalization_forward::desc fwd(dnnl::prop_kind::forward_training,
                                              src.get_desc(), epsilon, flags);
  dnnl::batch_normalization_forward::primitive_desc fwdPd(fwd, engine);
  dnnl::batch_normalization_backward::desc bwd(dnnl::prop_kind::backward,
                                               gradOut.get_desc(),
                                               src.get_desc(), epsilon, flags);
  dnnl::batch_normalization_backward::primitive_desc bwdPd(bwd, engine, fwdPd);
  memory mean = bindSlot(spec, spec.operands.at(3), mem, engine);
  memory var = bindSlot(spec, spec.operands.at(4), mem, engine);
  if (mean.get_desc().get_size() != fwdPd.mean_desc().get_size() ||
      var.get_desc().get_size() != fwdPd.variance_desc().get_size())
    unsupported(spec, "mean and var must hold one value per channel");
  return std::make_unique<PrimitiveKernel>(
      dnnl::batch_normalization_backward(bwdPd),
      std::unordered_map<int, memory>{
          {DNNL_ARG_SRC, src},
          {DNNL_ARG_MEAN,
           memory(fwdPd.mean_desc(), engine, mean.get_data_handle())},
          {DNNL_ARG_VARIANCE,
           memory(fwdPd.variance_desc(), engine, var.get_data_handle())},
          {DNNL_ARG_DIFF_DST, gradOut},
          {DNNL_ARG_SCALE, scale},
          {DNNL_ARG_SHIFT, zeroShift(fwdPd.weights_desc(), engine)},
          {DNNL_ARG_DIFF_SRC, gradIn},
          {DNNL_ARG_DIFF_SCALE, gradScale},
          {DNNL_ARG_DIFF_SHIFT, gradShift}});
}

std::unique_ptr<Kernel> createSoftmax(const KernelSpec &spec,
                                      const KernelMemory &mem,
                                      dnnl::engine &engine) {
  memory src = bindSlot(spec, spec.operands.at(0), mem, engine);
  memory dst = bindSlot(spec, spec.results.at(0), mem, engine);
  int axis = static_cast<int>(spec.number("axis", -1));
  if (axis < 0)
    axis += static_cast<int>(spec.operands[0].shape.size());
  dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_inference,
                                      spec.kind == "log_softmax"
                                          ? dnnl::algorithm::softmax_log
                                          : dnnl::algorithm::softmax_accurate,
                                      src.get_desc(), dst.get_desc(), axis);
  return std::make_unique<PrimitiveKernel>(
      dnnl::softmax_v2_forward(
          dnnl::softmax_v2_forward::primitive_desc(desc, engine)),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_DST, dst}});
}

/// A layer norm's input as [rows, normalized elements]: the axes before
/// `axis`, then the rest.
std::pair<int64_t, int64_t> layerNormRows(const KernelSpec &spec,
                                          const TensorSlot &x) {
  int64_t axis = static_cast<int64_t>(spec.number("axis", -1));
  if (axis < 0)
    axis += static_cast<int64_t>(x.shape.size());
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < x.shape.size(); ++i)
    (static_cast<int64_t>(i) < axis ? outer : inner) *= x.shape[i];
  return {outer, inner};
}

std::unique_ptr<Kernel> createLayerNorm(const KernelSpec &spec,
                                        const KernelMemory &mem,
                                        dnnl::engine &engine) {
  const TensorSlot &x = spec.operands.at(0);
  auto [outer, inner] = layerNormRows(spec, x);
  for (size_t i = 1; i < spec.operands.size(); ++i)
    if (spec.operands[i].numElements() != inner)
      unsupported(spec, "scale and bias must have one value per normalized "
                        "element");
  memory src = bindSlot(spec, x, mem, engine, {outer, inner});
  memory dst = bindSlot(spec, spec.results.at(0), mem, engine, {outer, inner});
  auto flags = dnnl::normalization_flags::use_scale;
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_DST, dst},
      {DNNL_ARG_SCALE,
       bindSlot(spec, spec.operands.at(1), mem, engine, {inner})}};
  if (spec.operands.size() > 2) {
    flags = flags | dnnl::normalization_flags::use_shift;
    args[DNNL_ARG_SHIFT] =
        bindSlot(spec, spec.operands[2], mem, engine, {inner});
  }
  dnnl::layer_normalization_forward::desc desc(
      dnnl::prop_kind::forward_inference, src.get_desc(),
      static_cast<float>(spec.number("epsilon", 1e-5)), flags);
  return std::make_unique<PrimitiveKernel>(
      dnnl::layer_normalization_forward(
          dnnl::layer_normalization_forward::primitive_desc(desc, engine)),
      args);
}

/// A backward primitive that needs statistics no op saved: a
/// forward-training primitive runs first to produce them.
class StatisticsBackwardKernel : public Kernel {
public:
  StatisticsBackwardKernel(dnnl::primitive statistics,
                           std::unordered_map<int, memory> statisticsArgs,
                           dnnl::primitive backward,
                           std::unordered_map<int, memory> backwardArgs)
      : statistics(std::move(statistics)),
        statisticsArgs(std::move(statisticsArgs)),
        backward(std::move(backward)), backwardArgs(std::move(backwardArgs)) {}
  void run(dnnl::stream &stream) override {
    statistics.execute(stream, statisticsArgs);
    backward.execute(stream, backwardArgs);
    stream.wait();
  }

private:
  dnnl::primitive statistics;
  std::unordered_map<int, memory> statisticsArgs;
  dnnl::primitive backward;
  std::unordered_map<int, memory> backwardArgs;
};

/// LayerNorm backward over [outer, inner] rows: the statistics of each row
/// are recomputed by a forward-training primitive, then oneDNN's backward
/// gives the input, scale and bias gradients.
std::unique_ptr<Kernel> createLayerNormGrad(const KernelSpec &spec,
                                            const KernelMemory &mem,
                                            dnnl::engine &engine) {
  const TensorSlot &x = spec.operands.at(1);
  auto [outer, inner] = layerNormRows(spec, x);
  if (spec.operands.at(2).numElements() != inner)
    unsupported(spec, "scale must have one value per normalized element");
  memory gradOut =
      bindSlot(spec, spec.operands[0], mem, engine, {outer, inner});
  memory src = bindSlot(spec, x, mem, engine, {outer, inner});
  memory scale = bindSlot(spec, spec.operands[2], mem, engine, {inner});
  memory gradIn =
      bindSlot(spec, spec.results.at(0), mem, engine, {outer, inner});
  memory gradScale = bindSlot(spec, spec.results.at(1), mem, engine, {inner});
  memory gradShift = bindSlot(spec, spec.results.at(2), mem, engine, {inner});
  float epsilon = static_cast<float>(spec.number("epsilon", 1e-5));
  auto flags = dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::desc fwd(dnnl::prop_kind::forward_training,
                                              src.get_desc(), epsilon, flags);
  dnnl::layer_normalization_forward::primitive_desc fwdPd(fwd, engine);
  dnnl::layer_normalization_backward::desc bwd(dnnl::prop_kind::backward,
                                               gradOut.get_desc(),
                                               src.get_desc(), epsilon, flags);
  dnnl::layer_normalization_backward::primitive_desc bwdPd(bwd, engine, fwdPd);
  memory mean(fwdPd.mean_desc(), engine), var(fwdPd.variance_desc(), engine);
  memory shift = zeroShift(fwdPd.weights_desc(), engine);
  return std::make_unique<StatisticsBackwardKernel>(
      dnnl::layer_normalization_forward(fwdPd),
      std::unordered_map<int, memory>{
          {DNNL_ARG_SRC, src},
          {DNNL_ARG_SCALE, scale},
          {DNNL_ARG_SHIFT, shift},
          {DNNL_ARG_MEAN, mean},
          {DNNL_ARG_VARIANCE, var},
          {DNNL_ARG_DST, memory(fwdPd.dst_desc(), engine)}},
      dnnl::layer_normalization_backward(bwdPd),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_MEAN, mean},
                                      {DNNL_ARG_VARIANCE, var},
                                      {DNNL_ARG_DIFF_DST, gradOut},
                                      {DNNL_ARG_SCALE, scale},
                                      {DNNL_ARG_SHIFT, shift},
                                      {DNNL_ARG_DIFF_SRC, gradIn},
                                      {DNNL_ARG_DIFF_SCALE, gradScale},
                                      {DNNL_ARG_DIFF_SHIFT, gradShift}});
}

/// Softmax / log-softmax backward from the forward's output.
std::unique_ptr<Kernel> createSoftmaxGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          dnnl::engine &engine) {
  memory gradOut = bindSlot(spec, spec.operands.at(0), mem, engine);
  memory dst = bindSlot(spec, spec.operands.at(1), mem, engine);
  memory gradIn = bindSlot(spec, spec.results.at(0), mem, engine);
  int axis = static_cast<int>(spec.number("axis", -1));
  if (axis < 0)
    axis += static_cast<int>(spec.operands[0].shape.size());
  auto algorithm = spec.kind == "log_softmax_grad"
                       ? dnnl::algorithm::softmax_log
                       : dnnl::algorithm::softmax_accurate;
  dnnl::softmax_v2_forward::desc fwd(dnnl::prop_kind::forward_training,
                                     algorithm, dst.get_desc(), dst.get_desc(),
                                     axis);
  dnnl::softmax_v2_forward::primitive_desc fwdPd(fwd, engine);
  dnnl::softmax_v2_backward::desc bwd(algorithm, gradIn.get_desc(),
                                      gradOut.get_desc(), dst.get_desc(), axis);
  return std::make_unique<PrimitiveKernel>(
      dnnl::softmax_v2_backward(
          dnnl::softmax_v2_backward::primitive_desc(bwd, engine, fwdPd)),
      std::unordered_map<int, memory>{{DNNL_ARG_DST, dst},
                                      {DNNL_ARG_DIFF_DST, gradOut},
                                      {DNNL_ARG_DIFF_SRC, gradIn}});
}

/// Dropout and its gradient: y = x * keep / (1 - ratio), keep drawn per
/// element from the stream; the gradient applies the same mask. With state
/// updates off (evaluation) dropout is the identity.
class DropoutKernel : public Kernel {
public:
  DropoutKernel(const float *in, float *out, int64_t count, float ratio,
                int64_t stream, const KernelMemory &mem, bool backward)
      : in(in), out(out), count(count), ratio(ratio), stream(stream),
        random(mem.random), updateState(mem.updateState), backward(backward) {}
  void run(dnnl::stream &) override {
    if (!backward && updateState && !*updateState) {
      std::memmove(out, in, count * sizeof(float));
      return;
    }
    float scale = 1.0f / (1.0f - ratio);
    uint64_t key = randomStreamKey(*random, stream);
    // Each element's draw depends on its index only: any split of the
    // loop gives the same mask. A draw is a hash (a few ns): threads pay
    // off from a few thousand elements each.
    parallelChunks(count, 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        out[i] = randomUniform(key, i) >= ratio ? in[i] * scale : 0.0f;
    });
  }

private:
  const float *in;
  float *out;
  int64_t count;
  float ratio;
  int64_t stream;
  const RandomState *random;
  const bool *updateState;
  bool backward;
};

std::unique_ptr<Kernel> createDropout(const KernelSpec &spec,
                                      const KernelMemory &mem,
                                      dnnl::engine &engine) {
  memory in = bindSlot(spec, spec.operands.at(0), mem, engine);
  memory out = bindSlot(spec, spec.results.at(0), mem, engine);
  float ratio = static_cast<float>(spec.number("ratio", 0.5));
  if (!(ratio > 0.0f && ratio < 1.0f))
    unsupported(spec, "ratio must be in (0, 1)");
  if (!mem.random)
    unsupported(spec, "the stage has no random state");
  return std::make_unique<DropoutKernel>(
      static_cast<const float *>(in.get_data_handle()),
      static_cast<float *>(out.get_data_handle()),
      spec.operands[0].numElements(), ratio,
      static_cast<int64_t>(spec.number("stream", 0)), mem,
      spec.kind == "dropout_grad");
}

/// Gradients of a convolution: with respect to its input (backward data)
/// or its weights (backward weights). oneDNN picks blocked layouts (its
/// plain-layout backward is an im2col gemm, several times slower).
std::unique_ptr<Kernel> createConvGrad(const KernelSpec &spec,
                                       const KernelMemory &mem,
                                       dnnl::engine &engine) {
  bool wrtInput = spec.kind == "conv_grad_input";
  const TensorSlot &gradOut = spec.operands.at(0);
  const TensorSlot &other = spec.operands.at(1); // weight or input
  const TensorSlot &result = spec.results.at(0);
  const TensorSlot &data = wrtInput ? result : other;
  const TensorSlot &weight = wrtInput ? other : result;
  ConvGeometry g = convGeometry(spec, data, weight);
  memory src = bindSlot(spec, data, mem, engine);
  memory weights = bindSlot(spec, weight, mem, engine, g.weightDims);
  memory dst = bindSlot(spec, gradOut, mem, engine);
  dnnl::convolution_forward::desc fwd(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
      anyLayout(src), anyLayout(weights), anyLayout(dst), g.strides,
      g.dilations, g.padL, g.padR);
  dnnl::convolution_forward::primitive_desc hint(fwd, engine);
  if (wrtInput) {
    dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, anyLayout(src), anyLayout(weights),
        anyLayout(dst), g.strides, g.dilations, g.padL, g.padR);
    dnnl::convolution_backward_data::primitive_desc pd(desc, engine, hint);
    auto kernel = std::make_unique<ReorderedKernel>(
        dnnl::convolution_backward_data(pd), engine);
    kernel->bind(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
    kernel->bind(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false);
    kernel->bind(DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), true);
    return kernel;
  }
  dnnl::convolution_backward_weights::desc desc(
      dnnl::algorithm::convolution_direct, anyLayout(src), anyLayout(weights),
      anyLayout(dst), g.strides, g.dilations, g.padL, g.padR);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, engine, hint);
  auto kernel = std::make_unique<ReorderedKernel>(
      dnnl::convolution_backward_weights(pd), engine);
  kernel->bind(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
  kernel->bind(DNNL_ARG_SRC, src, pd.src_desc(), false);
  kernel->bind(DNNL_ARG_DIFF_WEIGHTS, weights, pd.diff_weights_desc(), true);
  return kernel;
}

/// Max pooling backward: re-runs the forward in training mode for its
/// workspace (the arg-max positions), then routes the gradient.
class MaxPoolGradKernel : public Kernel {
public:
  MaxPoolGradKernel(dnnl::pooling_v2_forward::primitive_desc fwd,
                    dnnl::pooling_v2_backward::primitive_desc bwd, memory src,
                    memory gradOut, memory gradIn, dnnl::engine &engine)
      : forward(fwd), backward(bwd), src(src), gradOut(gradOut), gradIn(gradIn),
        scratch(fwd.dst_desc(), engine),
        workspace(fwd.workspace_desc(), engine) {}
  void run(dnnl::stream &stream) override {
    forward.execute(stream, {{DNNL_ARG_SRC, src},
                             {DNNL_ARG_DST, scratch},
                             {DNNL_ARG_WORKSPACE, workspace}});
    backward.execute(stream, {{DNNL_ARG_DIFF_DST, gradOut},
                              {DNNL_ARG_WORKSPACE, workspace},
                              {DNNL_ARG_DIFF_SRC, gradIn}});
    stream.wait();
  }

private:
  dnnl::pooling_v2_forward forward;
  dnnl::pooling_v2_backward backward;
  memory src, gradOut, gradIn, scratch, workspace;
};

std::unique_ptr<Kernel> createMaxPoolGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          dnnl::engine &engine) {
  const TensorSlot &gradOut = spec.operands.at(0), &x = spec.operands.at(1);
  const TensorSlot &gradIn = spec.results.at(0);
  size_t spatial = x.shape.size() - 2;
  std::vector<int64_t> k = spec.ints("kernel_shape"), s = spec.ints("strides"),
                       p = spec.ints("pads"), d = spec.ints("dilations");
  dims kernel(k.begin(), k.end()), strides(s.begin(), s.end()),
      padL(p.begin(), p.begin() + spatial), padR, dil;
  for (size_t i = 0; i < spatial; ++i) {
    dil.push_back(d[i] - 1);
    int64_t extent = (k[i] - 1) * d[i] + 1;
    padR.push_back((gradOut.shape[i + 2] - 1) * s[i] + extent - x.shape[i + 2] -
                   p[i]);
  }
  memory src = bindSlot(spec, x, mem, engine);
  memory dOut = bindSlot(spec, gradOut, mem, engine);
  memory dIn = bindSlot(spec, gradIn, mem, engine);
  dnnl::pooling_v2_forward::desc fwd(
      dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max,
      src.get_desc(), dOut.get_desc(), strides, kernel, dil, padL, padR);
  dnnl::pooling_v2_forward::primitive_desc fwdPd(fwd, engine);
  dnnl::pooling_v2_backward::desc bwd(dnnl::algorithm::pooling_max,
                                      dIn.get_desc(), dOut.get_desc(), strides,
                                      kernel, dil, padL, padR);
  dnnl::pooling_v2_backward::primitive_desc bwdPd(bwd, engine, fwdPd);
  return std::make_unique<MaxPoolGradKernel>(fwdPd, bwdPd, src, dOut, dIn,
                                             engine);
}

/// Average pooling backward: the gradient spread evenly over each window.
std::unique_ptr<Kernel> createAvgPoolGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          dnnl::engine &engine) {
  const TensorSlot &gradOut = spec.operands.at(0);
  const TensorSlot &gradIn = spec.results.at(0);
  size_t spatial = gradIn.shape.size() - 2;
  std::vector<int64_t> k = spec.ints("kernel_shape"), s = spec.ints("strides"),
                       p = spec.ints("pads");
  dims kernel(k.begin(), k.end()), strides(s.begin(), s.end()),
      padL(p.begin(), p.begin() + spatial), padR, dil(spatial, 0);
  for (size_t i = 0; i < spatial; ++i)
    padR.push_back((gradOut.shape[i + 2] - 1) * s[i] + k[i] -
                   gradIn.shape[i + 2] - p[i]);
  auto algorithm = spec.number("count_include_pad", 0) != 0
                       ? dnnl::algorithm::pooling_avg_include_padding
                       : dnnl::algorithm::pooling_avg_exclude_padding;
  memory dOut = bindSlot(spec, gradOut, mem, engine);
  memory dIn = bindSlot(spec, gradIn, mem, engine);
  dnnl::pooling_v2_forward::desc fwd(dnnl::prop_kind::forward_training,
                                     algorithm, dIn.get_desc(), dOut.get_desc(),
                                     strides, kernel, dil, padL, padR);
  dnnl::pooling_v2_forward::primitive_desc hint(fwd, engine);
  dnnl::pooling_v2_backward::desc bwd(algorithm, dIn.get_desc(),
                                      dOut.get_desc(), strides, kernel, dil,
                                      padL, padR);
  return std::make_unique<PrimitiveKernel>(
      dnnl::pooling_v2_backward(
          dnnl::pooling_v2_backward::primitive_desc(bwd, engine, hint)),
      std::unordered_map<int, memory>{{DNNL_ARG_DIFF_DST, dOut},
                                      {DNNL_ARG_DIFF_SRC, dIn}});
}

/// Softmax cross-entropy over integer labels, and its gradient: plain loops
/// (the work is tiny next to the layers that produce the logits).
class CrossEntropyKernel : public Kernel {
public:
  CrossEntropyKernel(const KernelSpec &spec, const KernelMemory &mem,
                     bool gradient)
      : gradient(gradient) {
    size_t first = gradient ? 1 : 0;
    const TensorSlot &logits = spec.operands.at(first);
    const TensorSlot &labels = spec.operands.at(first + 1);
    if (logits.dtype != DType::F32 || logits.shape.size() != 2 ||
        labels.dtype != DType::I64 || labels.shape.size() != 1 ||
        labels.shape[0] != logits.shape[0])
      unsupported(spec, "needs float32 [N, C] logits and int64 [N] labels");
    rows = logits.shape[0];
    classes = logits.shape[1];
    this->logits = static_cast<const float *>(address(logits, mem));
    this->labels = static_cast<const int64_t *>(address(labels, mem));
    if (gradient)
      seed = static_cast<const float *>(address(spec.operands.at(0), mem));
    out = static_cast<float *>(address(spec.results.at(0), mem));
  }
  void run(dnnl::stream &) override {
    double total = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float *row = logits + i * classes;
      int64_t label = labels[i];
      if (label < 0 || label >= classes)
        throw std::runtime_error("label " + std::to_string(label) + " of row " +
                                 std::to_string(i) + " is outside [0, " +
                                 std::to_string(classes) + ")");
      float max = row[0];
      for (int64_t c = 1; c < classes; ++c)
        max = std::max(max, row[c]);
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c)
        sum += std::exp(static_cast<double>(row[c] - max));
      if (!gradient) {
        total += std::log(sum) - (row[label] - max);
        continue;
      }
      float scale = *seed / static_cast<float>(rows);
      float *g = out + i * classes;
      for (int64_t c = 0; c < classes; ++c)
        g[c] = scale * (static_cast<float>(std::exp(row[c] - max) / sum) -
                        (c == label ? 1.0f : 0.0f));
    }
    if (!gradient)
      *out = static_cast<float>(total / static_cast<double>(rows));
  }

private:
  bool gradient;
  int64_t rows = 0, classes = 0;
  const float *logits = nullptr, *seed = nullptr;
  const int64_t *labels = nullptr;
  float *out = nullptr;
};

std::unique_ptr<Kernel> createCrossEntropy(const KernelSpec &spec,
                                           const KernelMemory &mem,
                                           dnnl::engine &) {
  return std::make_unique<CrossEntropyKernel>(
      spec, mem, spec.kind == "softmax_cross_entropy_grad");
}

/// Attribute arrays must match the operand ranks the kinds expect.
void checkShapes(const KernelSpec &spec) {
  auto need = [&](const std::string &key, size_t size) {
    if (spec.ints(key).size() != size)
      unsupported(spec, "attribute '" + key + "' must have " +
                            std::to_string(size) + " entries");
  };
  const TensorSlot &x = spec.operands.front();
  bool grad = spec.kind == "conv_grad_input" ||
              spec.kind == "conv_grad_weight" || spec.kind == "max_pool_grad";
  if (spec.kind == "avg_pool_grad") {
    size_t spatial = spec.results.front().shape.size() - 2;
    if (spec.results.front().shape.size() < 3 ||
        x.shape.size() != spec.results.front().shape.size())
      unsupported(spec, "operands must have rank >= 3");
    need("strides", spatial);
    need("pads", 2 * spatial);
    need("kernel_shape", spatial);
  }
  if (spec.kind == "conv" || spec.kind == "max_pool" ||
      spec.kind == "avg_pool" || spec.kind == "global_avg_pool" || grad) {
    if (x.shape.size() < 3 ||
        spec.results.front().shape.size() != x.shape.size())
      unsupported(spec, "operands must have rank >= 3");
    size_t spatial = x.shape.size() - 2;
    if (spec.kind != "global_avg_pool") {
      need("strides", spatial);
      need("pads", 2 * spatial);
    }
    if (spec.kind != "avg_pool" && spec.kind != "global_avg_pool")
      need("dilations", spatial);
    if (spec.kind == "max_pool" || spec.kind == "avg_pool" ||
        spec.kind == "max_pool_grad")
      need("kernel_shape", spatial);
    if (grad && (spec.operands.size() < 2 ||
                 spec.operands[1].shape.size() != x.shape.size()))
      unsupported(spec, "operands must have the same rank");
    if (spec.kind == "conv" &&
        (spec.operands.size() < 2 ||
         spec.operands[1].shape.size() != x.shape.size()))
      unsupported(spec, "weights must have the input's rank");
  }
  if (spec.kind == "gemm" && (spec.operands.size() < 2 || x.shape.size() != 2 ||
                              spec.operands[1].shape.size() != 2 ||
                              spec.results.front().shape.size() != 2))
    unsupported(spec, "operands must be 2-D");
}

} // namespace

std::unique_ptr<Kernel> createKernel(const KernelSpec &spec,
                                     const KernelMemory &memory,
                                     dnnl::engine &engine) {
  using Factory = std::unique_ptr<Kernel> (*)(
      const KernelSpec &, const KernelMemory &, dnnl::engine &);
  static const std::pair<const char *, Factory> factories[] = {
      {"gemm", createGemm},
      {"matmul", createMatmul},
      {"conv", createConv},
      {"max_pool", createPool},
      {"avg_pool", createPool},
      {"global_avg_pool", createPool},
      {"batch_norm", createBatchNorm},
      {"softmax", createSoftmax},
      {"log_softmax", createSoftmax},
      {"layer_norm", createLayerNorm},
      {"softmax_cross_entropy", createCrossEntropy},
      {"conv_grad_input", createConvGrad},
      {"conv_grad_weight", createConvGrad},
      {"max_pool_grad", createMaxPoolGrad},
      {"avg_pool_grad", createAvgPoolGrad},
      {"batch_norm_grad", createBatchNormGrad},
      {"softmax_cross_entropy_grad", createCrossEntropy},
      {"layer_norm_grad", createLayerNormGrad},
      {"dropout", createDropout},
      {"dropout_grad", createDropout},
      {"softmax_grad", createSoftmaxGrad},
      {"log_softmax_grad", createSoftmaxGrad},
  };
  if (spec.operands.empty() || spec.results.empty())
    unsupported(spec, "has no operands or results");
  checkShapes(spec);
  for (auto &[kind, factory] : factories) {
    if (spec.kind != kind)
      continue;
    try {
      return factory(spec, memory, engine);
    } catch (const dnnl::error &e) {
      unsupported(spec, std::string("oneDNN cannot create it: ") + e.what());
    } catch (const std::out_of_range &) {
      unsupported(spec, "the manifest entry misses operands or attributes");
    }
  }
  unsupported(spec, "unknown kernel kind");
}

namespace {
/// SplitMix64's output function.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
} // namespace

uint64_t randomStreamKey(const RandomState &state, int64_t stream) {
  uint64_t h = mix(state.seed + kGamma);
  h = mix(h ^ static_cast<uint64_t>(state.step));
  h = mix(h ^ static_cast<uint64_t>(state.microBatch));
  return mix(h ^ static_cast<uint64_t>(stream));
}

float randomUniform(uint64_t key, int64_t element) {
  // Element i of a stream is SplitMix64's i-th output from the stream's key.
  uint64_t z = mix(key + static_cast<uint64_t>(element + 1) * kGamma);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

} // namespace gpipe::runtime
