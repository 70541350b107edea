// The CPU backend's kernel families: each file of this folder defines the
// kinds of one family, and the registry (Registry.cpp) lists the families.
// Adding a family: a file here with its factories, its list below and in
// Registry.cpp, its kinds in common/KernelKind.cpp (docs/architecture.md).
#ifndef GPIPE_RUNTIME_CPU_KERNELS_FAMILIES_H
#define GPIPE_RUNTIME_CPU_KERNELS_FAMILIES_H

#include "OneDnn.h"

#include <vector>

namespace gpipe::runtime::cpu {

std::vector<KernelFactoryEntry> matmulKernels();    // gemm, matmul
std::vector<KernelFactoryEntry> convKernels();      // conv and its gradients
std::vector<KernelFactoryEntry> poolKernels();      // pooling and gradients
std::vector<KernelFactoryEntry> normKernels();      // batch/layer norm
std::vector<KernelFactoryEntry> softmaxKernels();   // (log) softmax
std::vector<KernelFactoryEntry> attentionKernels(); // attention, gradient
std::vector<KernelFactoryEntry> dropoutKernels();   // dropout and gradient
std::vector<KernelFactoryEntry> lossKernels();      // cross-entropy

/// The factory of `kind` on a CPU device, or null.
KernelFactory findKernelFactory(const std::string &kind);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_FAMILIES_H
