// Softmax cross-entropy over integer labels and its gradient, row by row
// in vector code on the stage's cores: a row's log-sum-exp from its
// maximum and a sum of exponentials, never a [rows, classes] buffer of
// probabilities (a language model's logits are as large as a layer: GPT-2's
// 50257 classes over 2048 positions are 412 MB).
#include "Families.h"

#include "KernelShapes.h"
#include "ParallelFor.h"
#include "SoftmaxRows.h"

#include <algorithm>
#include <cmath>
#include <string>

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
    labels =
        reinterpret_cast<const int64_t *>(mem.address(spec.operand("labels")));
    logits =
        reinterpret_cast<const float *>(mem.address(spec.operand("logits")));
    if (gradient) {
      seed = reinterpret_cast<const float *>(
          mem.address(spec.operand("grad_loss")));
      out = reinterpret_cast<float *>(mem.address(spec.result("grad_logits")));
    } else {
      out = reinterpret_cast<float *>(mem.address(spec.result("loss")));
      rowLoss.resize(static_cast<size_t>(rows));
    }
    // A chunk of rows a thread: at least 32K exponentials.
    grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, classes));
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
    if (!gradient) {
      parallelChunks(rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          rowLoss[i] =
              labels[i] == ignoreIndex
                  ? 0.0
                  : logSumExp(rowStats(i)) - logits[i * classes + labels[i]];
      });
      // Summed in row order: the same loss on any number of threads. No
      // row counts: 0 / 0, NaN, as PyTorch.
      double total = 0;
      for (double l : rowLoss)
        total += l;
      *out = static_cast<float>(total / static_cast<double>(counted));
      return;
    }
    // d loss / d logits = seed / counted x (softmax - one-hot label).
    float scale = *seed / static_cast<float>(counted);
    parallelChunks(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float *g = out + i * classes;
        int64_t label = labels[i];
        if (label == ignoreIndex) {
          std::fill(g, g + classes, 0.0f);
          continue;
        }
        // exp(x - max) / sum, as a softmax: x - max is exact or nearly
        // (a float lse would round the shift by up to 4e-6 at logits of 80).
        RowStats r = rowStats(i);
        expScaledRow(logits + i * classes, g, classes, r.max,
                     static_cast<float>(scale / r.sum));
        g[label] -= scale;
      }
    });
  }

private:
  /// Row i's maximum and sum_c exp(logits[i, c] - max).
  struct RowStats {
    float max;
    double sum;
  };
  RowStats rowStats(int64_t i) const {
    const float *row = logits + i * classes;
    float max = maxOfRow(row, classes);
    return {max, expSumOfRow(row, classes, max)};
  }
  static double logSumExp(RowStats r) { return r.max + std::log(r.sum); }

  bool gradient;
  int64_t rows = 0, classes = 0, ignoreIndex = -100, grain = 1;
  const float *seed = nullptr, *logits = nullptr;
  const int64_t *labels = nullptr;
  float *out = nullptr;
  std::vector<double> rowLoss;
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
