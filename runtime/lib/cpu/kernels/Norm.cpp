// Batch and layer normalization and their gradients: batch normalization
// of float tensors by the backend's own loops (BatchNormPlanes.h), of other
// types and layer normalization by oneDNN's primitives.
#include "Families.h"

#include "BatchNormPlanes.h"
#include "KernelShapes.h"
#include "ParallelFor.h"

#include "gpipe/common/KernelKind.h"

#include <cmath>

namespace gpipe::runtime::cpu {

namespace {

/// The state-update flag a training-mode batch norm reads (false while
/// evaluating), or null for a forward recomputed by the backward phase
/// (--recompute), which already updated the running statistics in the
/// forward phase.
const bool *runningStatisticsUpdate(const KernelSpec &spec,
                                    const KernelMemory &mem) {
  return spec.strings.count("gpipe.recompute") ? nullptr : mem.updateState;
}

/// running = momentum * running + (1 - momentum) * batch for each of
/// `channels` channels, the batch's (biased) variance of `count` elements a
/// channel unbiased, as PyTorch keeps it.
void updateRunningStatistics(float *runningMean, float *runningVar,
                             const float *mean, const float *var,
                             int64_t channels, float momentum, int64_t count) {
  float unbias = count > 1
                     ? static_cast<float>(count) / static_cast<float>(count - 1)
                     : 1.0f;
  for (int64_t c = 0; c < channels; ++c) {
    runningMean[c] = momentum * runningMean[c] + (1 - momentum) * mean[c];
    runningVar[c] = momentum * runningVar[c] + (1 - momentum) * var[c] * unbias;
  }
}

/// The loops of a batch normalization over a plain [N, C, inner...] float
/// tensor: channel c is N runs of `inner` elements, C x inner apart.
/// oneDNN 2.6's kernel for this layout (ncsp_bnorm) took 0.4 ms for 8
/// channels of 32 x 28 x 28 (2 GB/s) and 7 ns a plane on 1x1 maps; these
/// are passes at the caches' pace. Channels are split over the device's
/// cores, each channel summed by one thread in one order, so a result does
/// not depend on the thread count. Where a channel's runs are short (fewer
/// than kColumnsBelow elements: BatchNorm1d's [N, C], small maps) a pass
/// goes along each sample's row over the channels instead, with one
/// accumulator per element of the row.
class BatchNormLoops {
public:
  static constexpr int64_t kColumnsBelow = kBatchNormColumnsBelow;

  explicit BatchNormLoops(const TensorSlot &x)
      : rows(x.shape.at(0)), channels(x.shape.at(1)),
        inner(x.numElements() / std::max<int64_t>(rows * channels, 1)),
        columns(inner < kColumnsBelow) {
    if (columns) {
      size_t row = static_cast<size_t>(channels * inner);
      sumA.resize(row);
      sumB.resize(row);
      for (auto *v : {&colA, &colB, &colC, &colD})
        v->resize(row);
    }
  }

  int64_t count() const { return rows * inner; }

  /// Each channel's mean and (biased) variance of `x`.
  void statistics(const float *x, float *mean, float *var) const {
    eachChannels([&](int64_t c0, int64_t c1) {
      auto finish = [&](int64_t c, float pivot, double s, double q) {
        double m = s / double(count());
        mean[c] = static_cast<float>(pivot + m);
        // Rounding can take the difference below 0; a NaN stays NaN.
        double v = q / double(count()) - m * m;
        var[c] = static_cast<float>(v < 0 ? 0.0 : v);
      };
      if (!columns) {
        for (int64_t c = c0; c < c1; ++c) {
          float pivot = x[c * inner];
          double s = 0, q = 0;
          for (int64_t n = 0; n < rows; ++n)
            addShiftedSums(plane(x, n, c), inner, pivot, s, q);
          finish(c, pivot, s, q);
        }
        return;
      }
      int64_t j0 = startColumns(c0, c1);
      spread(colA, c0, c1, [&](int64_t c) { return x[c * inner]; });
      for (int64_t n = 0; n < rows; ++n)
        addColumnSums(plane(x, n, c0), (c1 - c0) * inner, colA.data() + j0,
                      sumA.data() + j0, sumB.data() + j0);
      for (int64_t c = c0; c < c1; ++c) {
        auto [s, q] = columnTotals(c);
        finish(c, colA[c * inner], s, q);
      }
    });
  }

  /// y = (x - mean) scale / sqrt(var + epsilon) + shift, per channel.
  void normalize(const float *x, float *y, const float *mean, const float *var,
                 const float *scale, const float *shift, float epsilon) const {
    eachChannels([&](int64_t c0, int64_t c1) {
      auto factor = [&](int64_t c) {
        return static_cast<float>(scale[c] /
                                  std::sqrt(double(var[c]) + epsilon));
      };
      if (!columns) {
        for (int64_t c = c0; c < c1; ++c) {
          float a = factor(c);
          for (int64_t n = 0; n < rows; ++n)
            normalizePlane(plane(x, n, c), plane(y, n, c), inner, mean[c], a,
                           shift[c]);
        }
        return;
      }
      spread(colA, c0, c1, [&](int64_t c) { return mean[c]; });
      spread(colB, c0, c1, factor);
      spread(colC, c0, c1, [&](int64_t c) { return shift[c]; });
      int64_t j0 = c0 * inner;
      for (int64_t n = 0; n < rows; ++n)
        normalizeColumns(plane(x, n, c0), plane(y, n, c0), (c1 - c0) * inner,
                         colA.data() + j0, colB.data() + j0, colC.data() + j0);
    });
  }

  /// The gradients of normalize(x) by (mean, var): by the batch's
  /// statistics (`batch`: they depend on x too) or by fixed ones.
  void gradient(const float *dy, const float *x, const float *mean,
                const float *var, const float *scale, float epsilon, bool batch,
                float *dx, float *dScale, float *dShift) const {
    eachChannels([&](int64_t c0, int64_t c1) {
      // Per channel from sum dy and sum dy (x - mean): the scale's and
      // shift's gradients and the factors of the input's.
      struct Factors {
        float scale, meanDy, slope;
      };
      auto factors = [&](int64_t c, double sumDy, double sumDyX) {
        double invstd = 1.0 / std::sqrt(double(var[c]) + epsilon);
        dScale[c] = static_cast<float>(sumDyX * invstd);
        dShift[c] = static_cast<float>(sumDy);
        double n = double(count());
        return Factors{static_cast<float>(scale[c] * invstd),
                       batch ? static_cast<float>(sumDy / n) : 0.0f,
                       batch ? static_cast<float>(invstd * invstd * sumDyX / n)
                             : 0.0f};
      };
      if (!columns) {
        for (int64_t c = c0; c < c1; ++c) {
          double sumDy = 0, sumDyX = 0;
          for (int64_t n = 0; n < rows; ++n)
            addGradientSums(plane(dy, n, c), plane(x, n, c), inner, mean[c],
                            sumDy, sumDyX);
          Factors f = factors(c, sumDy, sumDyX);
          for (int64_t n = 0; n < rows; ++n)
            gradientPlane(plane(dy, n, c), plane(x, n, c), plane(dx, n, c),
                          inner, f.scale, f.meanDy, mean[c], f.slope);
        }
        return;
      }
      int64_t j0 = startColumns(c0, c1), len = (c1 - c0) * inner;
      spread(colA, c0, c1, [&](int64_t c) { return mean[c]; });
      for (int64_t n = 0; n < rows; ++n)
        addColumnGradientSums(plane(dy, n, c0), plane(x, n, c0), len,
                              colA.data() + j0, sumA.data() + j0,
                              sumB.data() + j0);
      for (int64_t c = c0; c < c1; ++c) {
        auto [sumDy, sumDyX] = columnTotals(c);
        Factors f = factors(c, sumDy, sumDyX);
        std::fill_n(colB.data() + c * inner, inner, f.scale);
        std::fill_n(colC.data() + c * inner, inner, f.meanDy);
        std::fill_n(colD.data() + c * inner, inner, f.slope);
      }
      for (int64_t n = 0; n < rows; ++n)
        gradientColumns(plane(dy, n, c0), plane(x, n, c0), plane(dx, n, c0),
                        len, colB.data() + j0, colC.data() + j0,
                        colA.data() + j0, colD.data() + j0);
    });
  }

  int64_t numChannels() const { return channels; }

private:
  template <typename T> T *plane(T *base, int64_t n, int64_t c) const {
    return base + (n * channels + c) * inner;
  }
  /// The row pass over channels [c0, c1): their accumulators zeroed; the
  /// first of their elements in a row.
  int64_t startColumns(int64_t c0, int64_t c1) const {
    int64_t j0 = c0 * inner, len = (c1 - c0) * inner;
    std::fill_n(sumA.data() + j0, len, 0.0);
    std::fill_n(sumB.data() + j0, len, 0.0);
    return j0;
  }
  /// Channel c's two sums over the elements of its row (sumA, sumB).
  std::pair<double, double> columnTotals(int64_t c) const {
    double a = 0, b = 0;
    for (int64_t i = c * inner; i < (c + 1) * inner; ++i) {
      a += sumA[i];
      b += sumB[i];
    }
    return {a, b};
  }
  /// to[c inner + i] = valueOf(c) for each element i of channels [c0, c1).
  template <typename F>
  void spread(std::vector<float> &to, int64_t c0, int64_t c1, F valueOf) const {
    for (int64_t c = c0; c < c1; ++c)
      std::fill_n(to.data() + c * inner, inner, valueOf(c));
  }
  /// body(c0, c1) over ranges of channels, one per thread, each of at least
  /// 32K elements (a thread woken for less costs more than it saves).
  template <typename Body> void eachChannels(Body body) const {
    int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) /
                                             std::max<int64_t>(count(), 1));
    parallelChunks(channels, grain, body);
  }

  int64_t rows, channels, inner;
  bool columns;
  // The row pass's accumulators and per-element factors (each thread owns
  // the elements of its channels).
  mutable std::vector<double> sumA, sumB;
  mutable std::vector<float> colA, colB, colC, colD;
};

/// Whether the backend's own loops serve a batch normalization of `x`.
bool ownBatchNorm(const TensorSlot &x) {
  return x.dtype == DType::F32 && x.shape.size() >= 2 && x.numElements() > 0;
}

/// Checks that `slot` holds one value per channel of `x`.
void checkPerChannel(const KernelSpec &spec, const TensorSlot &x,
                     const TensorSlot &slot) {
  if (slot.dtype != DType::F32 || slot.numElements() != x.shape.at(1))
    spec.fail(slot.name + " must hold one float per channel (" +
              std::to_string(x.shape.at(1)) + ")");
}

/// BatchNorm by the backend's loops. On training steps (a training bundle's
/// op): the batch's statistics, written to the op's saved_mean and
/// saved_var results (the gradient reads them), then the running
/// statistics move towards them (running = momentum * running + (1 -
/// momentum) * batch, the variance unbiased as PyTorch keeps it). While
/// evaluating (state updates off) and in an inference bundle: the running
/// statistics. A forward recomputed by the backward phase (no update flag)
/// uses the batch's statistics and leaves the running ones alone.
class BatchNormKernel : public Kernel {
public:
  BatchNormKernel(const KernelSpec &spec, const KernelMemory &mem)
      : loops(spec.operand("input")), training(spec.flag("training")),
        epsilon(static_cast<float>(spec.number("epsilon"))),
        momentum(static_cast<float>(spec.number("momentum"))),
        update(runningStatisticsUpdate(spec, mem)) {
    const TensorSlot &x = spec.operand("input");
    if (spec.result("output").numElements() != x.numElements() ||
        spec.result("output").dtype != DType::F32)
      spec.fail("output must have the input's shape and type");
    input = floats(mem, x);
    output = floats(mem, spec.result("output"));
    float **perChannel[] = {&scale, &shift, &runningMean, &runningVar};
    const char *names[] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; ++i) {
      checkPerChannel(spec, x, spec.operand(names[i]));
      *perChannel[i] = floats(mem, spec.operand(names[i]));
    }
    if (training) {
      checkPerChannel(spec, x, spec.result("saved_mean"));
      checkPerChannel(spec, x, spec.result("saved_var"));
      savedMean = floats(mem, spec.result("saved_mean"));
      savedVar = floats(mem, spec.result("saved_var"));
    }
  }

  void run() override {
    if (!training || (update && !*update)) {
      loops.normalize(input, output, runningMean, runningVar, scale, shift,
                      epsilon);
      return;
    }
    loops.statistics(input, savedMean, savedVar);
    loops.normalize(input, output, savedMean, savedVar, scale, shift, epsilon);
    if (update)
      updateRunningStatistics(runningMean, runningVar, savedMean, savedVar,
                              loops.numChannels(), momentum, loops.count());
  }

private:
  BatchNormLoops loops;
  bool training;
  float epsilon, momentum;
  const bool *update;
  const float *input = nullptr;
  float *output = nullptr, *scale = nullptr, *shift = nullptr;
  float *runningMean = nullptr, *runningVar = nullptr;
  float *savedMean = nullptr, *savedVar = nullptr;
};

/// BatchNorm backward by the backend's loops: gradients for input, scale
/// and shift, from the statistics the forward normalized with (its
/// saved_mean and saved_var): the batch's when training, which then also
/// differentiates through them.
class BatchNormGradKernel : public Kernel {
public:
  BatchNormGradKernel(const KernelSpec &spec, const KernelMemory &mem)
      : loops(spec.operand("input")), training(spec.flag("training")),
        epsilon(static_cast<float>(spec.number("epsilon"))) {
    const TensorSlot &x = spec.operand("input");
    for (const TensorSlot *t :
         {&spec.operand("grad_output"), &spec.result("grad_input")})
      if (t->numElements() != x.numElements() || t->dtype != DType::F32)
        spec.fail(t->name + " must have the input's shape and type");
    for (const char *name : {"scale", "mean", "var"})
      checkPerChannel(spec, x, spec.operand(name));
    for (const char *name : {"grad_scale", "grad_bias"})
      checkPerChannel(spec, x, spec.result(name));
    gradOutput = floats(mem, spec.operand("grad_output"));
    input = floats(mem, x);
    scale = floats(mem, spec.operand("scale"));
    mean = floats(mem, spec.operand("mean"));
    var = floats(mem, spec.operand("var"));
    gradInput = floats(mem, spec.result("grad_input"));
    gradScale = floats(mem, spec.result("grad_scale"));
    gradShift = floats(mem, spec.result("grad_bias"));
  }

  void run() override {
    loops.gradient(gradOutput, input, mean, var, scale, epsilon, training,
                   gradInput, gradScale, gradShift);
  }

private:
  BatchNormLoops loops;
  bool training;
  float epsilon;
  const float *gradOutput = nullptr, *input = nullptr, *scale = nullptr,
              *mean = nullptr, *var = nullptr;
  float *gradInput = nullptr, *gradScale = nullptr, *gradShift = nullptr;
};

/// oneDNN's BatchNorm, for tensors of other types than float (as
/// BatchNormKernel otherwise). On training steps: oneDNN forward
/// training with the batch's statistics, written to the op's saved_mean and
/// saved_var results (the gradient reads them), then the running statistics
/// move towards them (running = momentum * running + (1 - momentum) * batch,
/// the variance unbiased as PyTorch keeps it). While evaluating (state updates
/// off): the running statistics, as inference does. A forward recomputed by
/// the backward phase (no update flag) uses the batch's statistics and
/// leaves the running ones alone.
class BatchNormTrainingKernel : public Kernel {
public:
  BatchNormTrainingKernel(OneDnn &dnn,
                          dnnl::batch_normalization_forward::primitive_desc pd,
                          std::unordered_map<int, memory> args,
                          dnnl::batch_normalization_forward evaluation,
                          std::unordered_map<int, memory> evaluationArgs,
                          float *runningMean, float *runningVar, float momentum,
                          int64_t perChannel, const bool *update)
      : dnn(dnn), primitive(pd), args(std::move(args)),
        evaluation(std::move(evaluation)),
        evaluationArgs(std::move(evaluationArgs)), runningMean(runningMean),
        runningVar(runningVar), momentum(momentum), perChannel(perChannel),
        update(update) {
    scratch.addScratchpad(primitive, dnn.engine, this->args);
    scratch.addScratchpad(this->evaluation, dnn.engine, this->evaluationArgs);
    dnn.workspace.reserve(scratch.bytes());
  }
  void run() override {
    scratch.bind(dnn.workspace);
    if (update && !*update) {
      evaluation.execute(dnn.stream, evaluationArgs);
      dnn.stream.wait();
      return;
    }
    primitive.execute(dnn.stream, args);
    dnn.stream.wait();
    if (!update)
      return;
    const float *mean =
        static_cast<float *>(args[DNNL_ARG_MEAN].get_data_handle());
    const float *var =
        static_cast<float *>(args[DNNL_ARG_VARIANCE].get_data_handle());
    int64_t channels = static_cast<int64_t>(
        args[DNNL_ARG_MEAN].get_desc().get_size() / sizeof(float));
    updateRunningStatistics(runningMean, runningVar, mean, var, channels,
                            momentum, perChannel);
  }

private:
  OneDnn &dnn;
  ScratchLayout scratch;
  dnnl::batch_normalization_forward primitive;
  std::unordered_map<int, memory> args;
  dnnl::batch_normalization_forward evaluation;
  std::unordered_map<int, memory> evaluationArgs;
  float *runningMean, *runningVar;
  float momentum;
  int64_t perChannel;
  const bool *update;
};

std::unique_ptr<Kernel> createOneDnnBatchNorm(const KernelSpec &spec,
                                              const KernelMemory &mem,
                                              OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input");
  if (x.shape.size() < 2)
    spec.fail("the input must have rank >= 2");
  memory src = bindSlot(spec, x, mem, dnn);
  memory dst = bindSlot(spec, spec.result("output"), mem, dnn);
  memory scale = bindSlot(spec, spec.operand("scale"), mem, dnn);
  memory shift = bindSlot(spec, spec.operand("bias"), mem, dnn);
  memory runningMean = bindSlot(spec, spec.operand("mean"), mem, dnn);
  memory runningVar = bindSlot(spec, spec.operand("var"), mem, dnn);
  float epsilon = static_cast<float>(spec.number("epsilon"));
  auto scaleShift = dnnl::normalization_flags::use_scale |
                    dnnl::normalization_flags::use_shift;
  dnnl::batch_normalization_forward::desc evalDesc(
      dnnl::prop_kind::forward_inference, src.get_desc(), epsilon,
      dnnl::normalization_flags::use_global_stats | scaleShift);
  dnnl::batch_normalization_forward evaluation(
      dnnl::batch_normalization_forward::primitive_desc(evalDesc, dnn.attr,
                                                        dnn.engine));
  std::unordered_map<int, memory> evaluationArgs{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_SCALE, scale},
      {DNNL_ARG_SHIFT, shift},
      {DNNL_ARG_MEAN, runningMean},
      {DNNL_ARG_VARIANCE, runningVar},
      {DNNL_ARG_DST, dst}};
  if (!spec.flag("training"))
    return std::make_unique<PrimitiveKernel>(dnn, std::move(evaluation),
                                             std::move(evaluationArgs));
  dnnl::batch_normalization_forward::desc desc(
      dnnl::prop_kind::forward_training, src.get_desc(), epsilon, scaleShift);
  dnnl::batch_normalization_forward::primitive_desc pd(desc, dnn.attr,
                                                       dnn.engine);
  int64_t perChannel = x.numElements() / std::max<int64_t>(x.shape.at(1), 1);
  memory savedMean = bindSlot(spec, spec.result("saved_mean"), mem, dnn);
  memory savedVar = bindSlot(spec, spec.result("saved_var"), mem, dnn);
  if (savedMean.get_desc().get_size() != pd.mean_desc().get_size() ||
      savedVar.get_desc().get_size() != pd.variance_desc().get_size())
    spec.fail("saved_mean and saved_var must hold one value per channel");
  return std::make_unique<BatchNormTrainingKernel>(
      dnn, pd,
      std::unordered_map<int, memory>{
          {DNNL_ARG_SRC, src},
          {DNNL_ARG_SCALE, scale},
          {DNNL_ARG_SHIFT, shift},
          {DNNL_ARG_MEAN,
           memory(pd.mean_desc(), dnn.engine, savedMean.get_data_handle())},
          {DNNL_ARG_VARIANCE,
           memory(pd.variance_desc(), dnn.engine, savedVar.get_data_handle())},
          {DNNL_ARG_DST, dst}},
      std::move(evaluation), std::move(evaluationArgs),
      static_cast<float *>(runningMean.get_data_handle()),
      static_cast<float *>(runningVar.get_data_handle()),
      static_cast<float>(spec.number("momentum")), perChannel,
      runningStatisticsUpdate(spec, mem));
}

/// oneDNN's BatchNorm backward, for tensors of other types than float:
/// gradients for input, scale and shift, from the
/// statistics the forward normalized with (its saved_mean and saved_var):
/// the batch's when training, which then also differentiates through them.
std::unique_ptr<Kernel> createOneDnnBatchNormGrad(const KernelSpec &spec,
                                                  const KernelMemory &mem,
                                                  OneDnn &dnn) {
  memory gradOut = bindSlot(spec, spec.operand("grad_output"), mem, dnn);
  memory src = bindSlot(spec, spec.operand("input"), mem, dnn);
  memory scale = bindSlot(spec, spec.operand("scale"), mem, dnn);
  memory gradIn = bindSlot(spec, spec.result("grad_input"), mem, dnn);
  memory gradScale = bindSlot(spec, spec.result("grad_scale"), mem, dnn);
  memory gradShift = bindSlot(spec, spec.result("grad_bias"), mem, dnn);
  float epsilon = static_cast<float>(spec.number("epsilon"));
  auto flags = dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  if (!spec.flag("training"))
    flags = flags | dnnl::normalization_flags::use_global_stats;
  dnnl::batch_normalization_forward::desc fwd(dnnl::prop_kind::forward_training,
                                              src.get_desc(), epsilon, flags);
  dnnl::batch_normalization_forward::primitive_desc fwdPd(fwd, dnn.attr,
                                                          dnn.engine);
  dnnl::batch_normalization_backward::desc bwd(dnnl::prop_kind::backward,
                                               gradOut.get_desc(),
                                               src.get_desc(), epsilon, flags);
  dnnl::batch_normalization_backward::primitive_desc bwdPd(bwd, dnn.attr,
                                                           dnn.engine, fwdPd);
  memory mean = bindSlot(spec, spec.operand("mean"), mem, dnn);
  memory var = bindSlot(spec, spec.operand("var"), mem, dnn);
  if (mean.get_desc().get_size() != fwdPd.mean_desc().get_size() ||
      var.get_desc().get_size() != fwdPd.variance_desc().get_size())
    spec.fail("mean and var must hold one value per channel");
  return std::make_unique<PrimitiveKernel>(
      dnn, dnnl::batch_normalization_backward(bwdPd),
      std::unordered_map<int, memory>{
          {DNNL_ARG_SRC, src},
          {DNNL_ARG_MEAN,
           memory(fwdPd.mean_desc(), dnn.engine, mean.get_data_handle())},
          {DNNL_ARG_VARIANCE,
           memory(fwdPd.variance_desc(), dnn.engine, var.get_data_handle())},
          {DNNL_ARG_DIFF_DST, gradOut},
          {DNNL_ARG_SCALE, scale},
          {DNNL_ARG_SHIFT, zeroShift(fwdPd.weights_desc(), dnn)},
          {DNNL_ARG_DIFF_SRC, gradIn},
          {DNNL_ARG_DIFF_SCALE, gradScale},
          {DNNL_ARG_DIFF_SHIFT, gradShift}});
}

std::unique_ptr<Kernel> createBatchNorm(const KernelSpec &spec,
                                        const KernelMemory &mem, OneDnn &dnn) {
  if (ownBatchNorm(spec.operand("input")))
    return std::make_unique<BatchNormKernel>(spec, mem);
  return createOneDnnBatchNorm(spec, mem, dnn);
}

std::unique_ptr<Kernel> createBatchNormGrad(const KernelSpec &spec,
                                            const KernelMemory &mem,
                                            OneDnn &dnn) {
  if (ownBatchNorm(spec.operand("input")))
    return std::make_unique<BatchNormGradKernel>(spec, mem);
  return createOneDnnBatchNormGrad(spec, mem, dnn);
}

std::unique_ptr<Kernel> createLayerNorm(const KernelSpec &spec,
                                        const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input");
  const TensorSlot &scale = spec.operand("scale");
  const TensorSlot *bias = spec.optionalOperand("bias");
  auto [outer, inner] = layerNormRows(spec, x);
  if (scale.numElements() != inner || (bias && bias->numElements() != inner))
    spec.fail("scale and bias must have one value per normalized element");
  memory src = bindSlot(spec, x, mem, dnn, {outer, inner});
  memory dst = bindSlot(spec, spec.result("output"), mem, dnn, {outer, inner});
  auto flags = dnnl::normalization_flags::use_scale;
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_DST, dst},
      {DNNL_ARG_SCALE, bindSlot(spec, scale, mem, dnn, {inner})}};
  if (bias) {
    flags = flags | dnnl::normalization_flags::use_shift;
    args[DNNL_ARG_SHIFT] = bindSlot(spec, *bias, mem, dnn, {inner});
  }
  dnnl::layer_normalization_forward::desc desc(
      dnnl::prop_kind::forward_inference, src.get_desc(),
      static_cast<float>(spec.number("epsilon")), flags);
  return std::make_unique<PrimitiveKernel>(
      dnn,
      dnnl::layer_normalization_forward(
          dnnl::layer_normalization_forward::primitive_desc(desc, dnn.attr,
                                                            dnn.engine)),
      args);
}

/// A backward primitive that needs statistics no op saved: a
/// forward-training primitive runs first to produce them (its output and
/// statistics in the device's workspace).
class StatisticsBackwardKernel : public Kernel {
public:
  StatisticsBackwardKernel(OneDnn &dnn, ScratchLayout scratch,
                           dnnl::primitive statistics,
                           std::unordered_map<int, memory> statisticsArgs,
                           dnnl::primitive backward,
                           std::unordered_map<int, memory> backwardArgs)
      : dnn(dnn), scratch(std::move(scratch)),
        statistics(std::move(statistics)),
        statisticsArgs(std::move(statisticsArgs)),
        backward(std::move(backward)), backwardArgs(std::move(backwardArgs)) {
    this->scratch.addScratchpad(this->statistics, dnn.engine,
                                this->statisticsArgs);
    this->scratch.addScratchpad(this->backward, dnn.engine, this->backwardArgs);
    dnn.workspace.reserve(this->scratch.bytes());
  }
  void run() override {
    scratch.bind(dnn.workspace);
    statistics.execute(dnn.stream, statisticsArgs);
    backward.execute(dnn.stream, backwardArgs);
    dnn.stream.wait();
  }

private:
  OneDnn &dnn;
  ScratchLayout scratch;
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
                                            OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input");
  auto [outer, inner] = layerNormRows(spec, x);
  if (spec.operand("scale").numElements() != inner)
    spec.fail("scale must have one value per normalized element");
  memory gradOut =
      bindSlot(spec, spec.operand("grad_output"), mem, dnn, {outer, inner});
  memory src = bindSlot(spec, x, mem, dnn, {outer, inner});
  memory scale = bindSlot(spec, spec.operand("scale"), mem, dnn, {inner});
  memory gradIn =
      bindSlot(spec, spec.result("grad_input"), mem, dnn, {outer, inner});
  memory gradScale =
      bindSlot(spec, spec.result("grad_scale"), mem, dnn, {inner});
  memory gradShift =
      bindSlot(spec, spec.result("grad_bias"), mem, dnn, {inner});
  float epsilon = static_cast<float>(spec.number("epsilon"));
  auto flags = dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::desc fwd(dnnl::prop_kind::forward_training,
                                              src.get_desc(), epsilon, flags);
  dnnl::layer_normalization_forward::primitive_desc fwdPd(fwd, dnn.attr,
                                                          dnn.engine);
  dnnl::layer_normalization_backward::desc bwd(dnnl::prop_kind::backward,
                                               gradOut.get_desc(),
                                               src.get_desc(), epsilon, flags);
  dnnl::layer_normalization_backward::primitive_desc bwdPd(bwd, dnn.attr,
                                                           dnn.engine, fwdPd);
  ScratchLayout scratch;
  memory mean = scratch.addMemory(fwdPd.mean_desc(), dnn.engine);
  memory var = scratch.addMemory(fwdPd.variance_desc(), dnn.engine);
  memory statisticsDst = scratch.addMemory(fwdPd.dst_desc(), dnn.engine);
  memory shift = zeroShift(fwdPd.weights_desc(), dnn);
  return std::make_unique<StatisticsBackwardKernel>(
      dnn, std::move(scratch), dnnl::layer_normalization_forward(fwdPd),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_SCALE, scale},
                                      {DNNL_ARG_SHIFT, shift},
                                      {DNNL_ARG_MEAN, mean},
                                      {DNNL_ARG_VARIANCE, var},
                                      {DNNL_ARG_DST, statisticsDst}},
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

} // namespace

std::vector<KernelFactoryEntry> normKernels() {
  return {{"batch_norm", createBatchNorm},
          {"batch_norm_grad", createBatchNormGrad},
          {"layer_norm", createLayerNorm},
          {"layer_norm_grad", createLayerNormGrad}};
}

} // namespace gpipe::runtime::cpu
