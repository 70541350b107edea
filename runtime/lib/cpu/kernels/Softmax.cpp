// Softmax and log-softmax along one axis, and their gradients, on oneDNN's
// softmax primitives; a gradient along the last axis (attention's scores,
// a classifier's classes) row by row in the runtime's own loops.
#include "Families.h"

#include "KernelShapes.h"
#include "ParallelFor.h"
#include "SoftmaxRows.h"

#include <algorithm>

namespace gpipe::runtime::cpu {

namespace {

dnnl::algorithm softmaxAlgorithm(bool log) {
  return log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
}

std::unique_ptr<Kernel> createSoftmax(const KernelSpec &spec,
                                      const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input");
  memory src = bindSlot(spec, x, mem, dnn);
  memory dst = bindSlot(spec, spec.result("output"), mem, dnn);
  dnnl::softmax_v2_forward::desc desc(
      dnnl::prop_kind::forward_inference,
      softmaxAlgorithm(spec.kind == "log_softmax"), src.get_desc(),
      dst.get_desc(), static_cast<int>(kernelAxis(spec, x.shape.size())));
  return std::make_unique<PrimitiveKernel>(
      dnn,
      dnnl::softmax_v2_forward(
          dnnl::softmax_v2_forward::primitive_desc(desc, dnn.attr, dnn.engine)),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_DST, dst}});
}

/// A softmax's or log-softmax's gradient along the last axis of dense
/// float32 tensors: rows of `n` split over the threads. oneDNN has no
/// vectorized backward for AVX2 (its reference loop took 0.78 ms where the
/// forward took 0.10, a GPT's [8, 4, 64, 64] scores on a Zen 3; these
/// loops 0.044); two passes over each row, the second while the first
/// left it in the cache. On AVX-512 CPUs they replace oneDNN's generated
/// backward too, one code for every CPU.
class SoftmaxGradRows : public Kernel {
public:
  SoftmaxGradRows(const float *y, const float *dy, float *dx, int64_t rows,
                  int64_t n, bool log)
      : y(y), dy(dy), dx(dx), rows(rows), n(n), log(log) {}

  void run() override {
    // At least a grain's worth of the three tensors' bytes a thread.
    int64_t grain = std::max<int64_t>(1, kParallelGrainBytes /
                                             std::max<int64_t>(12 * n, 1));
    parallelChunks(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        (log ? logSoftmaxGradRow : softmaxGradRow)(y + r * n, dy + r * n,
                                                   dx + r * n, n);
    });
  }

private:
  const float *y, *dy;
  float *dx;
  int64_t rows, n;
  bool log;
};

/// Softmax / log-softmax backward from the forward's output.
std::unique_ptr<Kernel> createSoftmaxGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          OneDnn &dnn) {
  const TensorSlot &gradOutput = spec.operand("grad_output");
  memory gradOut = bindSlot(spec, gradOutput, mem, dnn);
  memory dst = bindSlot(spec, spec.operand("output"), mem, dnn);
  memory gradIn = bindSlot(spec, spec.result("grad_input"), mem, dnn);
  int axis = static_cast<int>(kernelAxis(spec, gradOutput.shape.size()));
  bool log = spec.kind == "log_softmax_grad";
  if (axis + 1 == static_cast<int>(gradOutput.shape.size()) &&
      gradOutput.dtype == DType::F32 &&
      spec.operand("output").dtype == DType::F32 &&
      spec.result("grad_input").dtype == DType::F32) {
    int64_t n = gradOutput.shape.back();
    int64_t rows = n > 0 ? gradOutput.numElements() / n : 0;
    return std::make_unique<SoftmaxGradRows>(
        static_cast<const float *>(dst.get_data_handle()),
        static_cast<const float *>(gradOut.get_data_handle()),
        static_cast<float *>(gradIn.get_data_handle()), rows, n, log);
  }
  auto algorithm = softmaxAlgorithm(log);
  dnnl::softmax_v2_forward::desc fwd(dnnl::prop_kind::forward_training,
                                     algorithm, dst.get_desc(), dst.get_desc(),
                                     axis);
  dnnl::softmax_v2_forward::primitive_desc fwdPd(fwd, dnn.attr, dnn.engine);
  dnnl::softmax_v2_backward::desc bwd(algorithm, gradIn.get_desc(),
                                      gradOut.get_desc(), dst.get_desc(), axis);
  return std::make_unique<PrimitiveKernel>(
      dnn,
      dnnl::softmax_v2_backward(dnnl::softmax_v2_backward::primitive_desc(
          bwd, dnn.attr, dnn.engine, fwdPd)),
      std::unordered_map<int, memory>{{DNNL_ARG_DST, dst},
                                      {DNNL_ARG_DIFF_DST, gradOut},
                                      {DNNL_ARG_DIFF_SRC, gradIn}});
}

} // namespace

std::vector<KernelFactoryEntry> softmaxKernels() {
  return {{"softmax", createSoftmax},
          {"log_softmax", createSoftmax},
          {"softmax_grad", createSoftmaxGrad},
          {"log_softmax_grad", createSoftmaxGrad}};
}

} // namespace gpipe::runtime::cpu
