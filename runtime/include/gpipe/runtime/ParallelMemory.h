// Large copies and sums of the training loop on all cores of the calling
// thread's device (its OpenMP threads).
#ifndef GPIPE_RUNTIME_PARALLELMEMORY_H
#define GPIPE_RUNTIME_PARALLELMEMORY_H

#include <cstddef>
#include <cstdint>

namespace gpipe::runtime {

/// memcpy(dst, src, bytes), in one contiguous chunk per OpenMP thread when
/// `bytes` is large enough to be worth it. The ranges must not overlap.
void parallelCopy(void *dst, const void *src, size_t bytes);

/// acc[i] += x[i] for i < n, split like parallelCopy; each element is one
/// float addition, so the result does not depend on the thread count.
void parallelAccumulate(float *acc, const float *x, int64_t n);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_PARALLELMEMORY_H
