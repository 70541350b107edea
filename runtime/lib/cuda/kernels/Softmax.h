// Softmax and log-softmax along one axis, and their gradients, on the GPU:
// one thread per vector along the axis (the tensor seen as [outer, dim,
// inner]).
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_SOFTMAX_H
#define GPIPE_RUNTIME_CUDA_KERNELS_SOFTMAX_H

#include "BodyKernel.h"

#include <math.h>

namespace gpipe::runtime::cuda {

/// The vectors along the axis: vector t starts at base(t) and its elements
/// are `inner` apart.
struct AxisVectors {
  int64_t dim = 1, inner = 1;
  GPIPE_HD int64_t base(int64_t t) const {
    return t / inner * dim * inner + t % inner;
  }
};

struct SoftmaxBody {
  AxisVectors v;
  const float *x;
  float *y;
  bool log;
  GPIPE_HD void operator()(int64_t t) const {
    const float *xs = x + v.base(t);
    float *ys = y + v.base(t);
    float max = xs[0];
    for (int64_t k = 1; k < v.dim; ++k)
      max = fmaxf(max, xs[k * v.inner]);
    float sum = 0;
    for (int64_t k = 0; k < v.dim; ++k)
      sum += expf(xs[k * v.inner] - max);
    if (log) {
      float logSum = logf(sum);
      for (int64_t k = 0; k < v.dim; ++k)
        ys[k * v.inner] = xs[k * v.inner] - max - logSum;
      return;
    }
    for (int64_t k = 0; k < v.dim; ++k)
      ys[k * v.inner] = expf(xs[k * v.inner] - max) / sum;
  }
};

/// softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy).
struct SoftmaxGradBody {
  AxisVectors v;
  const float *dy, *y;
  float *dx;
  bool log;
  GPIPE_HD void operator()(int64_t t) const {
    int64_t b = v.base(t);
    float sum = 0;
    for (int64_t k = 0; k < v.dim; ++k) {
      int64_t e = b + k * v.inner;
      sum += log ? dy[e] : dy[e] * y[e];
    }
    for (int64_t k = 0; k < v.dim; ++k) {
      int64_t e = b + k * v.inner;
      dx[e] = log ? dy[e] - expf(y[e]) * sum : y[e] * (dy[e] - sum);
    }
  }
};

template <class L> class SoftmaxKernel : public Kernel {
public:
  SoftmaxKernel(L launcher, const KernelSpec &spec, const KernelMemory &mem,
                bool backward)
      : launcher(launcher), backward(backward) {
    log = spec.kind == "log_softmax" || spec.kind == "log_softmax_grad";
    const TensorSlot &x = spec.operand(backward ? "grad_output" : "input");
    const TensorSlot &out = spec.result(backward ? "grad_input" : "output");
    const TensorSlot *y = backward ? &spec.operand("output") : nullptr;
    needFloat32(spec, {&x, &out, y});
    if (out.shape != x.shape || (y && y->shape != x.shape))
      spec.fail("the operands' shapes differ");
    int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = kernelAxis(spec, x.shape.size());
    vectors.dim = x.shape[axis];
    for (int64_t i = axis + 1; i < rank; ++i)
      vectors.inner *= x.shape[i];
    count = vectors.dim ? x.numElements() / vectors.dim : 0;
    input = slotData<const float>(x, mem);
    output = y ? slotData<const float>(*y, mem) : nullptr;
    result = slotData<float>(out, mem);
  }
  void run() override {
    if (backward)
      launcher.launch(count,
                      SoftmaxGradBody{vectors, input, output, result, log});
    else
      launcher.launch(count, SoftmaxBody{vectors, input, result, log});
  }

private:
  L launcher;
  bool backward, log = false;
  AxisVectors vectors;
  int64_t count = 0;
  const float *input = nullptr, *output = nullptr;
  float *result = nullptr;
};

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_SOFTMAX_H
