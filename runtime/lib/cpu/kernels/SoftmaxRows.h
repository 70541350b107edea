// The row loops of a softmax computed tile by tile (the attention
// kernels): scores scaled and masked with their maximum, and exp with the
// sum, in AVX-512, AVX2 or scalar code as the CPU has them (the runtime is
// built for any x86-64); exp is one polynomial (Cephes' expf, about one
// ulp) in all three.
#ifndef GPIPE_RUNTIME_CPU_KERNELS_SOFTMAXROWS_H
#define GPIPE_RUNTIME_CPU_KERNELS_SOFTMAXROWS_H

#include <cstdint>

namespace gpipe::runtime::cpu {

/// exp(x) of one float, the same polynomial as expShiftedRow: 0 for x
/// below -87 (-inf, a masked score; e^-87 is near the smallest normal
/// float), NaN for NaN.
float expApprox(float x);

/// row[c] = scale row[c] + offset (+ mask[c]) for c < visible, -inf for
/// visible <= c < n (the keys a causal mask hides), in place; returns the
/// maximum of the first `visible` (-inf for none). `mask` is contiguous or
/// null.
float scaleRow(float *row, int64_t n, int64_t visible, float scale,
               float offset, const float *mask);

/// row[c] = exp(row[c] - shift) for c < n, in place; returns the sum of
/// the results.
float expShiftedRow(float *row, int64_t n, float shift);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_SOFTMAXROWS_H
