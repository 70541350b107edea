// Loops of the runtime on all cores of the calling thread's device (its
// OpenMP threads): large copies and sums of the training loop, and
// element-wise kernels.
#ifndef GPIPE_RUNTIME_PARALLELFOR_H
#define GPIPE_RUNTIME_PARALLELFOR_H

#include <cstddef>
#include <cstdint>
#include <functional>

namespace gpipe::runtime {

/// Bytes copied or summed per thread at least by parallelCopy and
/// parallelAccumulate (the compiler's cost model splits the gradients' sum
/// the same way: DeviceProfile::gradientSumThreads).
constexpr int64_t kParallelGrainBytes = 256 * 1024;

/// Calls body(begin, end) on [0, n) in one contiguous chunk per OpenMP
/// thread of the calling thread, with at least `grain` iterations per
/// thread (fewer threads, or the calling thread alone, for small n): the
/// grain is where waking a thread costs less than the work it takes over.
/// Chunk t of k is [n t / k, n (t + 1) / k).
void parallelChunks(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t)> &body);

/// memcpy(dst, src, bytes), split like parallelChunks. The ranges must not
/// overlap.
void parallelCopy(void *dst, const void *src, size_t bytes);

/// acc[i] += x[i] for i < n, split like parallelChunks; each element is
/// one float addition, so the result does not depend on the thread count.
void parallelAccumulate(float *acc, const float *x, int64_t n);

/// x[i] = bf[i], a bfloat16, widened to float32 (exactly), for `n`
/// elements.
void parallelWidenBf16(float *x, const uint16_t *bf, int64_t n);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_PARALLELFOR_H
