// Batch and layer normalization and their gradients on oneDNN's
// normalization primitives.
#include "Families.h"

#include "KernelShapes.h"

namespace gpipe::runtime::cpu {

namespace {

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

std::unique_ptr<Kernel> createBatchNorm(const KernelSpec &spec,
                                        const KernelMemory &mem, OneDnn &dnn) {
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
      // A forward recomputed by the backward phase (--recompute) has
      // already updated the running statistics in the forward phase.
      spec.strings.count("gpipe.recompute") ? nullptr : mem.updateState);
}

/// BatchNorm backward: gradients for input, scale and shift, from the
/// statistics the forward normalized with (its saved_mean and saved_var):
/// the batch's when training, which then also differentiates through them.
std::unique_ptr<Kernel> createBatchNormGrad(const KernelSpec &spec,
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
