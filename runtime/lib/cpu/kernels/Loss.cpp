// Softmax cross-entropy over integer labels and its gradient: plain loops
// (the work is tiny next to the layers that produce the logits).
#include "Families.h"

#include <algorithm>
#include <cmath>

namespace gpipe::runtime::cpu {

namespace {

class CrossEntropyKernel : public Kernel {
public:
  CrossEntropyKernel(const KernelSpec &spec, const KernelMemory &mem,
                     bool gradient)
      : gradient(gradient) {
    const TensorSlot &logits = spec.operand("logits");
    const TensorSlot &labels = spec.operand("labels");
    const TensorSlot &out = spec.result(gradient ? "grad_logits" : "loss");
    if (logits.dtype != DType::F32 || logits.shape.size() != 2 ||
        labels.dtype != DType::I64 || labels.shape.size() != 1 ||
        labels.shape[0] != logits.shape[0] || out.dtype != DType::F32 ||
        out.numElements() != (gradient ? logits.numElements() : 1))
      spec.fail("needs float32 [N, C] logits and int64 [N] labels");
    rows = logits.shape[0];
    classes = logits.shape[1];
    ignoreIndex = static_cast<int64_t>(spec.number("ignore_index"));
    this->logits = static_cast<const float *>(address(logits, mem));
    this->labels = static_cast<const int64_t *>(address(labels, mem));
    if (gradient)
      seed =
          static_cast<const float *>(address(spec.operand("grad_loss"), mem));
    this->out = static_cast<float *>(address(out, mem));
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
