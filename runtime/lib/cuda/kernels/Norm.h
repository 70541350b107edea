// Batch and layer normalization and their gradients on the GPU. Per-row
// statistics (layer norm) take one thread per row; per-channel sums (batch
// norm) and per-column sums (layer norm's parameter gradients) go through
// partial sums of fixed chunks, then one thread per channel adds them in
// order; element-wise results take one thread per element.
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_NORM_H
#define GPIPE_RUNTIME_CUDA_KERNELS_NORM_H

#include "BodyKernel.h"

#include <math.h>

namespace gpipe::runtime::cuda {

// ---------------------------------------------------------------------------
// Batch normalization over [N, C, spatial...]: per channel, M = N * S
// elements (S the spatial size).

struct Channels {
  int64_t n = 1, c = 1, s = 1, chunks = 1;
  GPIPE_HD int64_t perChannel() const { return n * s; }
  /// Element j (of M) of channel `ch`.
  GPIPE_HD int64_t element(int64_t ch, int64_t j) const {
    return (j / s * c + ch) * s + j % s;
  }
  GPIPE_HD int64_t channelOf(int64_t i) const { return i / s % c; }
};

/// partial[t] for t = ch * chunks + k: the sum over chunk k of channel ch of
/// f(element) (sum of x, or of squared deviations from `mean`).
struct ChannelPartialBody {
  Channels g;
  const float *x;
  const float *mean; // null: plain sums
  float *partial;
  GPIPE_HD void operator()(int64_t t) const {
    int64_t ch = t / g.chunks, k = t % g.chunks;
    int64_t begin = k * kReduceChunk, end = begin + kReduceChunk;
    if (end > g.perChannel())
      end = g.perChannel();
    float sum = 0;
    if (mean) {
      float m = mean[ch];
      for (int64_t j = begin; j < end; ++j) {
        float d = x[g.element(ch, j)] - m;
        sum += d * d;
      }
    } else {
      for (int64_t j = begin; j < end; ++j)
        sum += x[g.element(ch, j)];
    }
    partial[t] = sum;
  }
};

/// out[ch] = (sum of channel ch's partials) / M.
struct ChannelMeanBody {
  Channels g;
  const float *partial;
  float *out;
  GPIPE_HD void operator()(int64_t ch) const {
    double sum = 0;
    for (int64_t k = 0; k < g.chunks; ++k)
      sum += partial[ch * g.chunks + k];
    out[ch] = static_cast<float>(sum / static_cast<double>(g.perChannel()));
  }
};

struct BatchNormApplyBody {
  Channels g;
  const float *x, *scale, *bias, *mean, *var;
  float *y;
  float epsilon;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t ch = g.channelOf(i);
    y[i] = (x[i] - mean[ch]) / sqrtf(var[ch] + epsilon) * scale[ch] + bias[ch];
  }
};

/// running = momentum * running + (1 - momentum) * batch, the variance
/// unbiased (as PyTorch keeps it).
struct RunningStatisticsBody {
  const float *mean, *var;
  float *runningMean, *runningVar;
  float momentum, unbias;
  GPIPE_HD void operator()(int64_t ch) const {
    runningMean[ch] = momentum * runningMean[ch] + (1 - momentum) * mean[ch];
    runningVar[ch] =
        momentum * runningVar[ch] + (1 - momentum) * var[ch] * unbias;
  }
};

/// Partial sums of dy and of dy * xhat per (channel, chunk).
struct BatchNormGradPartialBody {
  Channels g;
  const float *dy, *x, *mean, *var;
  float *partialDy, *partialDyXhat;
  float epsilon;
  GPIPE_HD void operator()(int64_t t) const {
    int64_t ch = t / g.chunks, k = t % g.chunks;
    int64_t begin = k * kReduceChunk, end = begin + kReduceChunk;
    if (end > g.perChannel())
      end = g.perChannel();
    float m = mean[ch], rstd = 1.0f / sqrtf(var[ch] + epsilon);
    float sumDy = 0, sumDyXhat = 0;
    for (int64_t j = begin; j < end; ++j) {
      int64_t e = g.element(ch, j);
      sumDy += dy[e];
      sumDyXhat += dy[e] * (x[e] - m) * rstd;
    }
    partialDy[t] = sumDy;
    partialDyXhat[t] = sumDyXhat;
  }
};

struct BatchNormGradChannelBody {
  Channels g;
  const float *partialDy, *partialDyXhat;
  float *gradScale, *gradBias;
  GPIPE_HD void operator()(int64_t ch) const {
    double dy = 0, dyXhat = 0;
    for (int64_t k = 0; k < g.chunks; ++k) {
      dy += partialDy[ch * g.chunks + k];
      dyXhat += partialDyXhat[ch * g.chunks + k];
    }
    gradBias[ch] = static_cast<float>(dy);
    gradScale[ch] = static_cast<float>(dyXhat);
  }
};

/// Training: dx = scale rstd (dy - sum(dy)/M - xhat sum(dy xhat)/M); with
/// fixed statistics: dx = scale rstd dy.
struct BatchNormGradInputBody {
  Channels g;
  const float *dy, *x, *scale, *mean, *var, *gradScale, *gradBias;
  float *dx;
  float epsilon;
  bool training;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t ch = g.channelOf(i);
    float rstd = 1.0f / sqrtf(var[ch] + epsilon);
    if (!training) {
      dx[i] = dy[i] * scale[ch] * rstd;
      return;
    }
    float m = static_cast<float>(g.perChannel());
    float xhat = (x[i] - mean[ch]) * rstd;
    dx[i] = scale[ch] * rstd *
            (dy[i] - gradBias[ch] / m - xhat * gradScale[ch] / m);
  }
};

inline Channels channelsOf(const KernelSpec &spec, const TensorSlot &x) {
  if (x.shape.size() < 2)
    spec.fail("the input must have rank >= 2");
  Channels g;
  g.n = x.shape[0];
  g.c = x.shape[1];
  for (size_t i = 2; i < x.shape.size(); ++i)
    g.s *= x.shape[i];
  g.chunks = std::max<int64_t>(ceilDiv(g.perChannel(), kReduceChunk), 1);
  return g;
}

inline void needPerChannel(const KernelSpec &spec, const Channels &g,
                           std::initializer_list<const TensorSlot *> tensors) {
  for (const TensorSlot *t : tensors)
    if (t->numElements() != g.c)
      spec.fail("'" + t->name + "' must hold one value per channel");
}

/// BatchNorm forward. Training steps: the batch's statistics into
/// saved_mean and saved_var, then the running statistics move towards
/// them; evaluation (state updates off) and inference bundles: the running
/// statistics; a forward recomputed by the backward phase: the batch's,
/// running ones untouched (as the CPU backend).
template <class L> class BatchNormKernel : public Kernel {
public:
  BatchNormKernel(L launcher, const KernelSpec &spec, const KernelMemory &mem)
      : launcher(launcher) {
    const TensorSlot &x = spec.operand("input");
    const TensorSlot &out = spec.result("output");
    const TensorSlot &scale = spec.operand("scale"),
                     &bias = spec.operand("bias"), &mean = spec.operand("mean"),
                     &var = spec.operand("var");
    needFloat32(spec, {&x, &out, &scale, &bias, &mean, &var});
    g = channelsOf(spec, x);
    needPerChannel(spec, g, {&scale, &bias, &mean, &var});
    epsilon = static_cast<float>(spec.number("epsilon"));
    momentum = static_cast<float>(spec.number("momentum"));
    training = spec.flag("training");
    input = slotData<const float>(x, mem);
    output = slotData<float>(out, mem);
    this->scale = slotData<const float>(scale, mem);
    this->bias = slotData<const float>(bias, mem);
    runningMean = slotData<float>(mean, mem);
    runningVar = slotData<float>(var, mem);
    if (!training)
      return;
    const TensorSlot &sm = spec.result("saved_mean"),
                     &sv = spec.result("saved_var");
    needPerChannel(spec, g, {&sm, &sv});
    savedMean = slotData<float>(sm, mem);
    savedVar = slotData<float>(sv, mem);
    update = spec.strings.count("gpipe.recompute") ? nullptr : mem.updateState;
    partials =
        launcher.allocate(g.c * g.chunks * static_cast<int64_t>(sizeof(float)));
  }
  void run() override {
    int64_t count = g.c * g.perChannel();
    if (!training || (update && !*update)) {
      launcher.launch(count,
                      BatchNormApplyBody{g, input, scale, bias, runningMean,
                                         runningVar, output, epsilon});
      return;
    }
    float *partial = reinterpret_cast<float *>(partials.get());
    launcher.launch(g.c * g.chunks,
                    ChannelPartialBody{g, input, nullptr, partial});
    launcher.launch(g.c, ChannelMeanBody{g, partial, savedMean});
    launcher.launch(g.c * g.chunks,
                    ChannelPartialBody{g, input, savedMean, partial});
    launcher.launch(g.c, ChannelMeanBody{g, partial, savedVar});
    launcher.launch(count, BatchNormApplyBody{g, input, scale, bias, savedMean,
                                              savedVar, output, epsilon});
    if (!update)
      return;
    int64_t m = g.perChannel();
    float unbias =
        m > 1 ? static_cast<float>(m) / static_cast<float>(m - 1) : 1.0f;
    launcher.launch(g.c, RunningStatisticsBody{savedMean, savedVar, runningMean,
                                               runningVar, momentum, unbias});
  }

private:
  L launcher;
  Channels g;
  float epsilon = 1e-5f, momentum = 0.9f;
  bool training = false;
  const float *input = nullptr, *scale = nullptr, *bias = nullptr;
  float *output = nullptr, *runningMean = nullptr, *runningVar = nullptr;
  float *savedMean = nullptr, *savedVar = nullptr;
  const bool *update = nullptr;
  DeviceBuffer partials;
};

template <class L> class BatchNormGradKernel : public Kernel {
public:
  BatchNormGradKernel(L launcher, const KernelSpec &spec,
                      const KernelMemory &mem)
      : launcher(launcher) {
    const TensorSlot &dy = spec.operand("grad_output"),
                     &x = spec.operand("input"), &scale = spec.operand("scale"),
                     &mean = spec.operand("mean"), &var = spec.operand("var");
    const TensorSlot &dx = spec.result("grad_input"),
                     &gs = spec.result("grad_scale"),
                     &gb = spec.result("grad_bias");
    needFloat32(spec, {&dy, &x, &scale, &mean, &var, &dx, &gs, &gb});
    g = channelsOf(spec, x);
    needPerChannel(spec, g, {&scale, &mean, &var, &gs, &gb});
    if (dy.numElements() != x.numElements() ||
        dx.numElements() != x.numElements())
      spec.fail("grad_output, input and grad_input sizes differ");
    epsilon = static_cast<float>(spec.number("epsilon"));
    training = spec.flag("training");
    this->dy = slotData<const float>(dy, mem);
    this->x = slotData<const float>(x, mem);
    this->scale = slotData<const float>(scale, mem);
    this->mean = slotData<const float>(mean, mem);
    this->var = slotData<const float>(var, mem);
    this->dx = slotData<float>(dx, mem);
    gradScale = slotData<float>(gs, mem);
    gradBias = slotData<float>(gb, mem);
    partials = launcher.allocate(2 * g.c * g.chunks *
                                 static_cast<int64_t>(sizeof(float)));
  }
  void run() override {
    float *partialDy = reinterpret_cast<float *>(partials.get());
    float *partialDyXhat = partialDy + g.c * g.chunks;
    launcher.launch(g.c * g.chunks,
                    BatchNormGradPartialBody{g, dy, x, mean, var, partialDy,
                                             partialDyXhat, epsilon});
    launcher.launch(g.c, BatchNormGradChannelBody{g, partialDy, partialDyXhat,
                                                  gradScale, gradBias});
    launcher.launch(g.c * g.perChannel(),
                    BatchNormGradInputBody{g, dy, x, scale, mean, var,
                                           gradScale, gradBias, dx, epsilon,
                                           training});
  }

private:
  L launcher;
  Channels g;
  float epsilon = 1e-5f;
  bool training = true;
  const float *dy = nullptr, *x = nullptr, *scale = nullptr, *mean = nullptr,
              *var = nullptr;
  float *dx = nullptr, *gradScale = nullptr, *gradBias = nullptr;
  DeviceBuffer partials;
};

// ---------------------------------------------------------------------------
// Layer normalization over [rows, inner] (the axes before `axis`, then the
// rest).

/// stats[2r], stats[2r+1]: row r's mean and 1 / sqrt(var + epsilon).
struct RowStatisticsBody {
  const float *x;
  float *stats;
  int64_t inner;
  float epsilon;
  GPIPE_HD void operator()(int64_t r) const {
    const float *row = x + r * inner;
    float sum = 0;
    for (int64_t j = 0; j < inner; ++j)
      sum += row[j];
    float mean = sum / static_cast<float>(inner);
    float sq = 0;
    for (int64_t j = 0; j < inner; ++j)
      sq += (row[j] - mean) * (row[j] - mean);
    stats[2 * r] = mean;
    stats[2 * r + 1] = 1.0f / sqrtf(sq / static_cast<float>(inner) + epsilon);
  }
};

struct LayerNormApplyBody {
  const float *x, *stats, *scale, *bias;
  float *y;
  int64_t inner;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t r = i / inner, j = i % inner;
    float v = (x[i] - stats[2 * r]) * stats[2 * r + 1] * scale[j];
    y[i] = bias ? v + bias[j] : v;
  }
};

/// sums[2r], sums[2r+1]: row r's sum of dy*scale and of dy*scale*xhat.
struct LayerNormRowSumsBody {
  const float *dy, *x, *stats, *scale;
  float *sums;
  int64_t inner;
  GPIPE_HD void operator()(int64_t r) const {
    float a = 0, b = 0;
    for (int64_t j = 0; j < inner; ++j) {
      int64_t e = r * inner + j;
      float g = dy[e] * scale[j];
      a += g;
      b += g * (x[e] - stats[2 * r]) * stats[2 * r + 1];
    }
    sums[2 * r] = a;
    sums[2 * r + 1] = b;
  }
};

/// dx = rstd (dy scale - mean(dy scale) - xhat mean(dy scale xhat)).
struct LayerNormGradInputBody {
  const float *dy, *x, *stats, *scale, *sums;
  float *dx;
  int64_t inner;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t r = i / inner, j = i % inner;
    float n = static_cast<float>(inner);
    float xhat = (x[i] - stats[2 * r]) * stats[2 * r + 1];
    dx[i] = stats[2 * r + 1] *
            (dy[i] * scale[j] - sums[2 * r] / n - xhat * sums[2 * r + 1] / n);
  }
};

/// Rows of one partial sum of the parameters' gradients: a thread per
/// column over all rows would leave most of a GPU idle (a Transformer's
/// 256 columns of 8192 rows: 3.4 ms on an H100, 0.05 ms in two passes).
constexpr int64_t kLayerNormRowChunk = 64;

/// Column j's sums over chunk c of the rows, element i = c x inner + j:
/// grad_scale's sum(dy xhat) and grad_bias's sum(dy) (threads of
/// neighbouring columns read neighbouring addresses).
struct LayerNormGradParamsPartBody {
  const float *dy, *x, *stats;
  float *scalePart, *biasPart;
  int64_t rows, inner;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t c = i / inner, j = i - c * inner;
    int64_t begin = c * kLayerNormRowChunk;
    int64_t end =
        begin + kLayerNormRowChunk < rows ? begin + kLayerNormRowChunk : rows;
    float s = 0, b = 0;
    for (int64_t r = begin; r < end; ++r) {
      int64_t e = r * inner + j;
      s += dy[e] * (x[e] - stats[2 * r]) * stats[2 * r + 1];
      b += dy[e];
    }
    scalePart[i] = s;
    biasPart[i] = b;
  }
};

/// Column j's gradients: its chunks' partial sums added in order (the same
/// result on every run).
struct LayerNormGradParamsBody {
  const float *scalePart, *biasPart;
  float *gradScale, *gradBias;
  int64_t chunks, inner;
  GPIPE_HD void operator()(int64_t j) const {
    float s = 0, b = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      s += scalePart[c * inner + j];
      b += biasPart[c * inner + j];
    }
    gradScale[j] = s;
    gradBias[j] = b;
  }
};

template <class L> class LayerNormKernel : public Kernel {
public:
  LayerNormKernel(L launcher, const KernelSpec &spec, const KernelMemory &mem,
                  bool backward)
      : launcher(launcher), backward(backward) {
    const TensorSlot &x = spec.operand("input");
    const TensorSlot &scale = spec.operand("scale");
    std::tie(rows, inner) = layerNormRows(spec, x);
    if (scale.numElements() != inner)
      spec.fail("scale must have one value per normalized element");
    epsilon = static_cast<float>(spec.number("epsilon"));
    input = slotData<const float>(x, mem);
    this->scale = slotData<const float>(scale, mem);
    if (backward) {
      const TensorSlot &dy = spec.operand("grad_output");
      const TensorSlot &dx = spec.result("grad_input"),
                       &gs = spec.result("grad_scale"),
                       &gb = spec.result("grad_bias");
      needFloat32(spec, {&x, &scale, &dy, &dx, &gs, &gb});
      if (gs.numElements() != inner || gb.numElements() != inner)
        spec.fail("grad_scale and grad_bias must have one value per "
                  "normalized element");
      this->dy = slotData<const float>(dy, mem);
      result = slotData<float>(dx, mem);
      gradScale = slotData<float>(gs, mem);
      gradBias = slotData<float>(gb, mem);
    } else {
      const TensorSlot *bias = spec.optionalOperand("bias");
      const TensorSlot &out = spec.result("output");
      needFloat32(spec, {&x, &scale, bias, &out});
      if (bias && bias->numElements() != inner)
        spec.fail("bias must have one value per normalized element");
      this->bias = bias ? slotData<const float>(*bias, mem) : nullptr;
      result = slotData<float>(out, mem);
    }
    scratch = launcher.allocate((backward ? 4 : 2) * rows *
                                static_cast<int64_t>(sizeof(float)));
    if (backward) {
      chunks = std::max<int64_t>(ceilDiv(rows, kLayerNormRowChunk), 1);
      partials = launcher.allocate(2 * chunks * inner *
                                   static_cast<int64_t>(sizeof(float)));
    }
  }
  void run() override {
    float *stats = reinterpret_cast<float *>(scratch.get());
    launcher.launch(rows, RowStatisticsBody{input, stats, inner, epsilon});
    if (!backward) {
      launcher.launch(rows * inner, LayerNormApplyBody{input, stats, scale,
                                                       bias, result, inner});
      return;
    }
    float *sums = stats + 2 * rows;
    launcher.launch(rows,
                    LayerNormRowSumsBody{dy, input, stats, scale, sums, inner});
    launcher.launch(
        rows * inner,
        LayerNormGradInputBody{dy, input, stats, scale, sums, result, inner});
    auto *scalePart = reinterpret_cast<float *>(partials.get());
    float *biasPart = scalePart + chunks * inner;
    launcher.launch(chunks * inner,
                    LayerNormGradParamsPartBody{dy, input, stats, scalePart,
                                                biasPart, rows, inner});
    launcher.launch(inner,
                    LayerNormGradParamsBody{scalePart, biasPart, gradScale,
                                            gradBias, chunks, inner});
  }

private:
  L launcher;
  bool backward;
  int64_t rows = 0, inner = 0;
  float epsilon = 1e-5f;
  const float *input = nullptr, *scale = nullptr, *bias = nullptr,
              *dy = nullptr;
  float *result = nullptr, *gradScale = nullptr, *gradBias = nullptr;
  DeviceBuffer scratch;
  /// The parameters' gradients' partial sums, `chunks` rows of them.
  int64_t chunks = 0;
  DeviceBuffer partials;
};

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_NORM_H
