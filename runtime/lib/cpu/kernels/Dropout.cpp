// Dropout and its gradient: plain loops over the counter-based random
// numbers of Random.h, split across the device's cores.
#include "Families.h"

#include "DropoutRows.h"
#include "ParallelFor.h"
#include "Random.h"

#include <cstring>

namespace gpipe::runtime::cpu {

namespace {

/// y = x * keep / (1 - ratio), keep drawn per element from the stream; the
/// gradient applies the same mask. With state updates off (evaluation)
/// dropout is the identity.
class DropoutKernel : public Kernel {
public:
  DropoutKernel(const float *in, float *out, int64_t count, float ratio,
                int64_t stream, const KernelMemory &mem, bool backward)
      : in(in), out(out), count(count), ratio(ratio), stream(stream),
        random(mem.random), updateState(mem.updateState), backward(backward) {}
  void run() override {
    if (!backward && updateState && !*updateState) {
      std::memmove(out, in, count * sizeof(float));
      return;
    }
    float scale = 1.0f / (1.0f - ratio);
    uint64_t key = randomStreamKey(*random, stream);
    // Each element's draw depends on its index only: any split of the
    // loop gives the same mask. A draw is a hash: a few ns in scalar
    // code, about 0.5 ns in the AVX-512 loop (8192 floats in 4.2 us on one
    // core); the grain of 4096 elements a thread was chosen for the
    // scalar cost and has not been measured again.
    parallelChunks(count, 4096, [&](int64_t begin, int64_t end) {
      dropoutRange(in + begin, out + begin, end - begin, begin, key, ratio,
                   scale);
    });
  }

private:
  const float *in;
  float *out;
  int64_t count;
  float ratio;
  int64_t stream;
  const RandomState *random;
  const bool *updateState;
  bool backward;
};

std::unique_ptr<Kernel> createDropout(const KernelSpec &spec,
                                      const KernelMemory &mem, OneDnn &dnn,
                                      bool backward) {
  const TensorSlot &input = spec.operand(backward ? "grad_output" : "input");
  memory in = bindSlot(spec, input, mem, dnn);
  memory out =
      bindSlot(spec, spec.result(backward ? "grad_input" : "output"), mem, dnn);
  float ratio = static_cast<float>(spec.number("ratio"));
  if (!(ratio > 0.0f && ratio < 1.0f))
    spec.fail("ratio must be in (0, 1)");
  if (!mem.random)
    spec.fail("the stage has no random state");
  return std::make_unique<DropoutKernel>(
      static_cast<const float *>(in.get_data_handle()),
      static_cast<float *>(out.get_data_handle()), input.numElements(), ratio,
      static_cast<int64_t>(spec.number("stream")), mem, backward);
}

std::unique_ptr<Kernel> createDropoutForward(const KernelSpec &spec,
                                             const KernelMemory &mem,
                                             OneDnn &dnn) {
  return createDropout(spec, mem, dnn, /*backward=*/false);
}

std::unique_ptr<Kernel> createDropoutGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          OneDnn &dnn) {
  return createDropout(spec, mem, dnn, /*backward=*/true);
}

} // namespace

std::vector<KernelFactoryEntry> dropoutKernels() {
  return {{"dropout", createDropoutForward},
          {"dropout_grad", createDropoutGrad}};
}

} // namespace gpipe::runtime::cpu
