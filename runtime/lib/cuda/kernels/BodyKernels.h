// The CUDA backend's kernels written as bodies (BodyKernel.h), by kind.
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_BODYKERNELS_H
#define GPIPE_RUNTIME_CUDA_KERNELS_BODYKERNELS_H

#include "Dropout.h"
#include "Loss.h"
#include "Norm.h"
#include "Pool.h"
#include "Softmax.h"

#include <memory>

namespace gpipe::runtime::cuda {

/// The body kernel of `spec`'s kind run through `launcher`, or null if the
/// kind is not one (gemm, matmul and convolutions run on cuBLAS/cuDNN).
template <class L>
std::unique_ptr<Kernel> createBodyKernel(L launcher, const KernelSpec &spec,
                                         const KernelMemory &mem) {
  const std::string &k = spec.kind;
  if (k == "dropout" || k == "dropout_grad")
    return std::make_unique<DropoutKernel<L>>(launcher, spec, mem,
                                              k == "dropout_grad");
  if (k == "softmax" || k == "log_softmax")
    return std::make_unique<SoftmaxKernel<L>>(launcher, spec, mem, false);
  if (k == "softmax_grad" || k == "log_softmax_grad")
    return std::make_unique<SoftmaxKernel<L>>(launcher, spec, mem, true);
  if (k == "batch_norm")
    return std::make_unique<BatchNormKernel<L>>(launcher, spec, mem);
  if (k == "batch_norm_grad")
    return std::make_unique<BatchNormGradKernel<L>>(launcher, spec, mem);
  if (k == "layer_norm" || k == "layer_norm_grad")
    return std::make_unique<LayerNormKernel<L>>(launcher, spec, mem,
                                                k == "layer_norm_grad");
  if (k == "softmax_cross_entropy" || k == "softmax_cross_entropy_grad")
    return std::make_unique<CrossEntropyKernel<L>>(
        launcher, spec, mem, k == "softmax_cross_entropy_grad");
  if (k == "max_pool" || k == "avg_pool" || k == "global_avg_pool" ||
      k == "max_pool_grad" || k == "avg_pool_grad")
    return std::make_unique<PoolKernel<L>>(launcher, spec, mem);
  return nullptr;
}

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_BODYKERNELS_H
