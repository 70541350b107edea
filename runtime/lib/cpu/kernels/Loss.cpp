// Softmax cross-entropy over integer labels and its gradient: plain loops
// (the work is tiny next to the layers that produce the logits).
#include "Families.h"

#include "KernelShapes.h"

#include <algorithm>
#include <cmath>

namespace gpipe::runtime::cpu {

namespace {

class CrossEntropyKernel : public Kernel {
public:
  CrossEntropyKernel(const KernelSpec &spec, const KernelMemory &mem,
                     bool gradient)
      : gradient(gradient) {
    CrossEntropyShape shape = crossEntropyShape(spec, gradient);
    rows = shape.rows;
    classes = shape.classes;
    ignoreIndex = shape.ignoreIndex;
    this->logits =
        reinterpret_cast<const float *>(mem.address(spec.operand("logits")));
    this->labels =
        reinterpret_cast<const int64_t *>(mem.address(spec.operand("labels")));
    if (gradient)
      seed = reinterpret_cast<const float *>(
          mem.address(spec.operand("grad_loss")));
    this->out = reinterpret_cast<float *>(
        mem.address(spec.result(gradient ? "grad_logits" : "loss")));
  }
  void run() override {
    // The mean is over the rows that count: those not labelled ignoreIndex.
    int64_t counted = 0;
    for (int64_t i = 0; i < rows; ++i)
      counted += labels[i] != ignoreIndex;
    double total = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float *row = logits + i * classes;
      int64_t label = labels[i];
      if (label == ignoreIndex) {
        if (gradient)
          std::fill(out + i * classes, out + (i + 1) * classes, 0.0f);
        continue;
      }
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
      float scale = *seed / static_cast<float>(counted);
      float *g = out + i * classes;
      for (int64_t c = 0; c < classes; ++c)
        g[c] = scale * (static_cast<float>(std::exp(row[c] - max) / sum) -
                        (c == label ? 1.0f : 0.0f));
    }
    if (!gradient)
      // No row counts: 0 / 0, NaN, as PyTorch.
      *out = static_cast<float>(total / static_cast<double>(counted));
  }

private:
  bool gradient;
  int64_t rows = 0, classes = 0, ignoreIndex = -100;
  const float *logits = nullptr, *seed = nullptr;
  const int64_t *labels = nullptr;
  float *out = nullptr;
};

std::unique_ptr<Kernel> createCrossEntropy(const KernelSpec &spec,
                                           const KernelMemory &mem, OneDnn &) {
  return std::make_unique<CrossEntropyKernel>(spec, mem, /*gradient=*/false);
}

std::unique_ptr<Kernel> createCrossEntropyGrad(const KernelSpec &spec,
                                               const KernelMemory &mem,
                                               OneDnn &) {
  return std::make_unique<CrossEntropyKernel>(spec, mem, /*gradient=*/true);
}

} // namespace

std::vector<KernelFactoryEntry> lossKernels() {
  return {{"softmax_cross_entropy", createCrossEntropy},
          {"softmax_cross_entropy_grad", createCrossEntropyGrad}};
}

} // namespace gpipe::runtime::cpu
