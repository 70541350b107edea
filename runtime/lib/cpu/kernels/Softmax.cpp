// Softmax and log-softmax along one axis, and their gradients, on oneDNN's
// softmax primitives.
#include "Families.h"

#include "KernelShapes.h"

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

/// Softmax / log-softmax backward from the forward's output.
std::unique_ptr<Kernel> createSoftmaxGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          OneDnn &dnn) {
  const TensorSlot &gradOutput = spec.operand("grad_output");
  memory gradOut = bindSlot(spec, gradOutput, mem, dnn);
  memory dst = bindSlot(spec, spec.operand("output"), mem, dnn);
  memory gradIn = bindSlot(spec, spec.result("grad_input"), mem, dnn);
  int axis = static_cast<int>(kernelAxis(spec, gradOutput.shape.size()));
  auto algorithm = softmaxAlgorithm(spec.kind == "log_softmax_grad");
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
