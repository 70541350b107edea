#include "ParallelFor.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace gpipe::runtime {

void parallelChunks(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  int threads = static_cast<int>(std::min<int64_t>(
      omp_get_max_threads(), n / std::max<int64_t>(grain, 1)));
  if (threads <= 1) {
    body(0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
    body(n * t / k, n * (t + 1) / k);
  }
}

void parallelCopy(void *dst, const void *src, size_t bytes) {
  char *d = static_cast<char *>(dst);
  const char *s = static_cast<const char *>(src);
  parallelChunks(static_cast<int64_t>(bytes), kParallelGrainBytes,
                 [&](int64_t begin, int64_t end) {
                   std::memcpy(d + begin, s + begin, end - begin);
                 });
}

void parallelAccumulate(float *acc, const float *x, int64_t n) {
  parallelChunks(n, kParallelGrainBytes / sizeof(float),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i)
                     acc[i] += x[i];
                 });
}

void parallelWidenBf16(float *x, const uint16_t *bf, int64_t n) {
  parallelChunks(n, kParallelGrainBytes / sizeof(float),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t i = begin; i < end; ++i) {
                     uint32_t u = static_cast<uint32_t>(bf[i]) << 16;
                     std::memcpy(x + i, &u, sizeof u);
                   }
                 });
}

} // namespace gpipe::runtime
