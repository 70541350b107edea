// Softmax cross-entropy over integer labels and its gradient on the GPU:
// one thread per row for the row's log-sum-exp, one thread for the mean
// (rows in order, in double precision as the CPU backend), one thread per
// element for the gradient. A label outside [0, classes) is reported as on
// the CPU (the forward reads the first bad row back and throws).
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_LOSS_H
#define GPIPE_RUNTIME_CUDA_KERNELS_LOSS_H

#include "BodyKernel.h"

#include <math.h>
#include <stdexcept>

namespace gpipe::runtime::cuda {

/// Per-row scratch of the cross-entropy: the row's max, its sum of
/// exp(x - max), its loss, and whether it counts (1) or is ignored (0).
struct CrossEntropyRow {
  double sum, loss;
  float max, counts;
};

struct CrossEntropyRowBody {
  const float *logits;
  const int64_t *labels;
  CrossEntropyRow *rows;
  int64_t *badRow;
  int64_t classes, ignoreIndex;
  GPIPE_HD void operator()(int64_t r) const {
    const float *row = logits + r * classes;
    int64_t label = labels[r];
    CrossEntropyRow out{0, 0, 0, 0};
    if (label != ignoreIndex && (label < 0 || label >= classes)) {
      *badRow = r; // any bad row will do: the host reports one
    } else {
      float max = row[0];
      for (int64_t c = 1; c < classes; ++c)
        max = fmaxf(max, row[c]);
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c)
        sum += exp(static_cast<double>(row[c] - max));
      out.max = max;
      out.sum = sum;
      if (label != ignoreIndex) {
        out.counts = 1;
        out.loss = log(sum) - (row[label] - max);
      }
    }
    rows[r] = out;
  }
};

/// One thread: the mean loss over the rows that count (0 / 0 = NaN when
/// none does, as PyTorch), and their number for the gradient.
struct CrossEntropyMeanBody {
  const CrossEntropyRow *rows;
  int64_t count;
  float *loss;    // null in the gradient
  float *counted; // the number of rows that count
  GPIPE_HD void operator()(int64_t) const {
    double total = 0, n = 0;
    for (int64_t r = 0; r < count; ++r) {
      total += rows[r].loss;
      n += rows[r].counts;
    }
    if (loss)
      *loss = static_cast<float>(total / n);
    *counted = static_cast<float>(n);
  }
};

struct CrossEntropyGradBody {
  const float *logits, *seed, *counted;
  const int64_t *labels;
  const CrossEntropyRow *rows;
  float *grad;
  int64_t classes, ignoreIndex;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t r = i / classes, c = i % classes;
    int64_t label = labels[r];
    if (label == ignoreIndex || label < 0 || label >= classes) {
      grad[i] = 0.0f;
      return;
    }
    float scale = *seed / *counted;
    float p = static_cast<float>(expf(logits[i] - rows[r].max) / rows[r].sum);
    grad[i] = scale * (p - (c == label ? 1.0f : 0.0f));
  }
};

struct FillBody {
  int64_t *data;
  int64_t value;
  GPIPE_HD void operator()(int64_t i) const { data[i] = value; }
};

template <class L> class CrossEntropyKernel : public Kernel {
public:
  CrossEntropyKernel(L launcher, const KernelSpec &spec,
                     const KernelMemory &mem, bool gradient)
      : launcher(launcher), gradient(gradient) {
    CrossEntropyShape shape = crossEntropyShape(spec, gradient);
    count = shape.rows;
    classes = shape.classes;
    ignoreIndex = shape.ignoreIndex;
    this->logits = slotData<const float>(spec.operand("logits"), mem);
    this->labels = slotData<const int64_t>(spec.operand("labels"), mem);
    if (gradient)
      seed = slotData<const float>(spec.operand("grad_loss"), mem);
    this->out =
        slotData<float>(spec.result(gradient ? "grad_logits" : "loss"), mem);
    // Rows, then the bad row's index and the count of rows that count.
    scratch = launcher.allocate(
        count * static_cast<int64_t>(sizeof(CrossEntropyRow)) + 16);
  }
  void run() override {
    auto *rows = reinterpret_cast<CrossEntropyRow *>(scratch.get());
    auto *badRow = reinterpret_cast<int64_t *>(rows + count);
    auto *counted = reinterpret_cast<float *>(badRow + 1);
    if (!gradient)
      launcher.launch(1, FillBody{badRow, -1});
    launcher.launch(count, CrossEntropyRowBody{logits, labels, rows, badRow,
                                               classes, ignoreIndex});
    launcher.launch(1, CrossEntropyMeanBody{rows, count,
                                            gradient ? nullptr : out, counted});
    if (gradient) {
      launcher.launch(count * classes,
                      CrossEntropyGradBody{logits, seed, counted, labels, rows,
                                           out, classes, ignoreIndex});
      return;
    }
    int64_t bad = -1;
    launcher.toHost(&bad, badRow, sizeof bad);
    if (bad < 0)
      return;
    int64_t label = 0;
    launcher.toHost(&label, labels + bad, sizeof label);
    throw std::runtime_error("label " + std::to_string(label) + " of row " +
                             std::to_string(bad) + " is outside [0, " +
                             std::to_string(classes) + ")");
  }

private:
  L launcher;
  bool gradient;
  int64_t count = 0, classes = 0, ignoreIndex = -100;
  const float *logits = nullptr, *seed = nullptr;
  const int64_t *labels = nullptr;
  float *out = nullptr;
  DeviceBuffer scratch;
};

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_LOSS_H
