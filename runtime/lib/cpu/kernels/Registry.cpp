// The CPU backend's kernel registry: every family's kinds in one table.
#include "Families.h"

namespace gpipe::runtime::cpu {

KernelFactory findKernelFactory(const std::string &kind) {
  for (auto family :
       {matmulKernels, convKernels, poolKernels, normKernels, softmaxKernels,
        attentionKernels, dropoutKernels, lossKernels})
    for (const KernelFactoryEntry &entry : family())
      if (kind == entry.kind)
        return entry.create;
  return nullptr;
}

} // namespace gpipe::runtime::cpu
