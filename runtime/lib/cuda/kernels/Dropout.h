// Dropout and its gradient on the GPU: the mask of Random.h (the same
// numbers as the CPU's), one thread per element.
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_DROPOUT_H
#define GPIPE_RUNTIME_CUDA_KERNELS_DROPOUT_H

#include "BodyKernel.h"

namespace gpipe::runtime::cuda {

struct DropoutBody {
  const float *in;
  float *out;
  uint64_t key;
  float ratio, scale;
  GPIPE_HD void operator()(int64_t i) const {
    out[i] = randomUniform(key, i) >= ratio ? in[i] * scale : 0.0f;
  }
};

/// y = x * keep / (1 - ratio); the gradient applies the same mask. While
/// evaluating (state updates off) the forward is the identity.
template <class L> class DropoutKernel : public Kernel {
public:
  DropoutKernel(L launcher, const KernelSpec &spec, const KernelMemory &mem,
                bool backward)
      : launcher(launcher), updateState(mem.updateState), random(mem.random),
        backward(backward) {
    const TensorSlot &input = spec.operand(backward ? "grad_output" : "input");
    const TensorSlot &output = spec.result(backward ? "grad_input" : "output");
    needFloat32(spec, {&input, &output});
    if (input.numElements() != output.numElements())
      spec.fail("the input and output sizes differ");
    ratio = static_cast<float>(spec.number("ratio"));
    if (!(ratio > 0.0f && ratio < 1.0f))
      spec.fail("ratio must be in (0, 1)");
    if (!random)
      spec.fail("the stage has no random state");
    stream = static_cast<int64_t>(spec.number("stream"));
    count = input.numElements();
    in = slotData<const float>(input, mem);
    out = slotData<float>(output, mem);
  }
  void run() override {
    if (!backward && updateState && !*updateState) {
      if (in != out)
        launcher.copy(out, in, count * static_cast<int64_t>(sizeof(float)));
      return;
    }
    launcher.launch(count,
                    DropoutBody{in, out, randomStreamKey(*random, stream),
                                ratio, 1.0f / (1.0f - ratio)});
  }

private:
  L launcher;
  const bool *updateState;
  const RandomState *random;
  bool backward;
  float ratio = 0.5f;
  int64_t stream = 0, count = 0;
  const float *in = nullptr;
  float *out = nullptr;
};

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_DROPOUT_H
