// Softmax cross-entropy over integer labels and its gradient: oneDNN's
// (log-)softmax over the classes, then a pass over the rows for the labels
// (for a language model's vocabulary the loss is as large as a layer).
#include "Families.h"

#include "KernelShapes.h"

#include <algorithm>
#include <string>

namespace gpipe::runtime::cpu {

namespace {

class CrossEntropyKernel : public Kernel {
public:
  CrossEntropyKernel(const KernelSpec &spec, const KernelMemory &mem,
                     OneDnn &dnn, bool gradient)
      : dnn(dnn), gradient(gradient) {
    CrossEntropyShape shape = crossEntropyShape(spec, gradient);
    rows = shape.rows;
    classes = shape.classes;
    ignoreIndex = shape.ignoreIndex;
    labels =
        reinterpret_cast<const int64_t *>(mem.address(spec.operand("labels")));
    if (gradient)
      seed = reinterpret_cast<const float *>(
          mem.address(spec.operand("grad_loss")));
    memory logits =
        bindSlot(spec, spec.operand("logits"), mem, dnn, {rows, classes});
    // The forward's log-probabilities in a buffer of the kernel's own; the
    // gradient's probabilities straight into the gradient, scaled after.
    memory probabilities = gradient
                               ? bindSlot(spec, spec.result("grad_logits"), mem,
                                          dnn, {rows, classes})
                               : memory(plainDesc({rows, classes}), dnn.engine);
    out =
        reinterpret_cast<float *>(gradient ? probabilities.get_data_handle()
                                           : mem.address(spec.result("loss")));
    logProbabilities =
        gradient ? nullptr
                 : static_cast<float *>(probabilities.get_data_handle());
    dnnl::softmax_v2_forward::desc desc(
        dnnl::prop_kind::forward_inference,
        gradient ? dnnl::algorithm::softmax_accurate
                 : dnnl::algorithm::softmax_log,
        logits.get_desc(), probabilities.get_desc(), /*axis=*/1);
    softmax = dnnl::softmax_v2_forward(
        dnnl::softmax_v2_forward::primitive_desc(desc, dnn.engine));
    args = {{DNNL_ARG_SRC, logits}, {DNNL_ARG_DST, probabilities}};
  }

  void run() override {
    // The mean is over the rows that count: those not labelled ignoreIndex.
    int64_t counted = 0;
    for (int64_t i = 0; i < rows; ++i) {
      int64_t label = labels[i];
      if (label == ignoreIndex)
        continue;
      if (label < 0 || label >= classes)
        throw std::runtime_error("label " + std::to_string(label) + " of row " +
                                 std::to_string(i) + " is outside [0, " +
                                 std::to_string(classes) + ")");
      ++counted;
    }
    softmax.execute(dnn.stream, args);
    dnn.stream.wait();
    if (!gradient) {
      double total = 0;
      for (int64_t i = 0; i < rows; ++i)
        if (labels[i] != ignoreIndex)
          total -= logProbabilities[i * classes + labels[i]];
      // No row counts: 0 / 0, NaN, as PyTorch.
      *out = static_cast<float>(total / static_cast<double>(counted));
      return;
    }
    // d loss / d logits = seed / counted x (softmax - one-hot label).
    float scale = *seed / static_cast<float>(counted);
    for (int64_t i = 0; i < rows; ++i) {
      float *g = out + i * classes;
      int64_t label = labels[i];
      if (label == ignoreIndex) {
        std::fill(g, g + classes, 0.0f);
        continue;
      }
      for (int64_t c = 0; c < classes; ++c)
        g[c] *= scale;
      g[label] -= scale;
    }
  }

private:
  OneDnn &dnn;
  bool gradient;
  int64_t rows = 0, classes = 0, ignoreIndex = -100;
  const float *seed = nullptr, *logProbabilities = nullptr;
  const int64_t *labels = nullptr;
  float *out = nullptr;
  dnnl::primitive softmax;
  std::unordered_map<int, memory> args;
};

std::unique_ptr<Kernel> createCrossEntropy(const KernelSpec &spec,
                                           const KernelMemory &mem,
                                           OneDnn &dnn) {
  return std::make_unique<CrossEntropyKernel>(spec, mem, dnn,
                                              /*gradient=*/false);
}

std::unique_ptr<Kernel> createCrossEntropyGrad(const KernelSpec &spec,
                                               const KernelMemory &mem,
                                               OneDnn &dnn) {
  return std::make_unique<CrossEntropyKernel>(spec, mem, dnn,
                                              /*gradient=*/true);
}

} // namespace

std::vector<KernelFactoryEntry> lossKernels() {
  return {{"softmax_cross_entropy", createCrossEntropy},
          {"softmax_cross_entropy_grad", createCrossEntropyGrad}};
}

} // namespace gpipe::runtime::cpu
