// The CUDA backend's own kernels are written once, as *bodies*: small
// structs of device pointers and sizes whose `operator()(i)` computes the
// element (or row, or channel) numbered i. A kernel class runs its bodies
// through a Launcher:
//
//   template <class Body> void launch(int64_t n, const Body &body);
//       body(i) for every i in [0, n), queued in order on the device;
//   DeviceBuffer allocate(int64_t bytes);   scratch memory of the device;
//   void copy(void *dst, const void *src, int64_t bytes);  queued copy;
//   void toHost(void *dst, const void *src, int64_t bytes);  waits.
//
// The CUDA launcher (Kernels.cu) runs a body as a grid-stride loop on the
// stage's stream; the runtime's tests run the same kernel classes with a
// host launcher (a plain loop) and compare them with the CPU backend's
// oneDNN kernels (test/runtime/CudaBodyKernelsTest.cpp), which checks the
// index arithmetic and the math without a GPU. Bodies use no shared
// memory and no synchronization: one thread computes one result, and
// reductions over many elements go through partial sums of fixed chunks
// (deterministic: the same order on every run).
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_BODYKERNEL_H
#define GPIPE_RUNTIME_CUDA_KERNELS_BODYKERNEL_H

#include "DeviceBackend.h"
#include "HostDevice.h"
#include "KernelShapes.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

namespace gpipe::runtime::cuda {

/// The device address of a kernel operand or result.
template <class T>
T *slotData(const TensorSlot &slot, const KernelMemory &mem) {
  return reinterpret_cast<T *>(mem.address(slot));
}

/// Fails the kernel unless every tensor is float32.
inline void needFloat32(const KernelSpec &spec,
                        std::initializer_list<const TensorSlot *> tensors) {
  for (const TensorSlot *t : tensors)
    if (t && t->dtype != DType::F32)
      spec.fail("only float32 tensors are implemented on the GPU");
}

/// How many elements a thread of a chunked reduction sums.
constexpr int64_t kReduceChunk = 512;

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_BODYKERNEL_H
