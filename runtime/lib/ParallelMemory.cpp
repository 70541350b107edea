#include "gpipe/runtime/ParallelMemory.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace gpipe::runtime {

namespace {
/// Below this many bytes per thread, waking the threads costs more than
/// the copy.
constexpr size_t kBytesPerThread = 256 * 1024;

/// Calls f(begin, end) over [0, n) elements of `size` bytes, one
/// contiguous chunk per thread.
template <typename F> void chunked(size_t n, size_t size, F f) {
  size_t threads = std::min<size_t>(static_cast<size_t>(omp_get_max_threads()),
                                    n * size / kBytesPerThread);
  if (threads <= 1) {
    f(size_t(0), n);
    return;
  }
#pragma omp parallel num_threads(static_cast <int>(threads))
  {
    size_t t = static_cast<size_t>(omp_get_thread_num()),
           k = static_cast<size_t>(omp_get_num_threads());
    f(n * t / k, n * (t + 1) / k);
  }
}
} // namespace

void parallelCopy(void *dst, const void *src, size_t bytes) {
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  chunked(bytes, 1, [&](size_t begin, size_t end) {
    std::memcpy(d + begin, s + begin, end - begin);
  });
}

void parallelAccumulate(float *acc, const float *x, int64_t n) {
  chunked(static_cast<size_t>(std::max<int64_t>(n, 0)), sizeof(float),
          [&](size_t begin, size_t end) {
            for (size_t i = begin; i < end; ++i)
              acc[i] += x[i];
          });
}

} // namespace gpipe::runtime
