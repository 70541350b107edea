// Dropout over a range of elements: element i kept when its counter-based
// uniform number (Random.h: SplitMix64 of the stream's key and i) is at
// least the ratio. AVX-512 code where the CPU has AVX512F and AVX512DQ
// (64-bit products), AVX2 code (64-bit products from 32-bit ones) where it
// has AVX2, scalar code elsewhere: the same integers, the same numbers,
// the same masks as every other backend.
#ifndef GPIPE_RUNTIME_CPU_KERNELS_DROPOUTROWS_H
#define GPIPE_RUNTIME_CPU_KERNELS_DROPOUTROWS_H

#include <cstdint>

namespace gpipe::runtime::cpu {

/// For c < n: out[c] = in[c] * scale where randomUniform(key, first + c)
/// >= ratio (element first + c of the stream is kept), else 0. `in` and
/// `out` may be the same array.
void dropoutRange(const float *in, float *out, int64_t n, int64_t first,
                  uint64_t key, float ratio, float scale);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_DROPOUTROWS_H
