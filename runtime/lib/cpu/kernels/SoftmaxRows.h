// The row loops of a softmax computed tile by tile (the attention
// kernels): scores scaled and masked with their maximum, and exp with the
// sum, in AVX-512, AVX2 or scalar code as the CPU has them (the runtime is
// built for any x86-64); exp is one polynomial (Cephes' expf, about one
// ulp) in all three. And the gradients of a softmax and a log-softmax
// along a row, from their outputs.
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

/// The maximum of row[0, n) (-inf for n = 0; with NaN entries it may skip
/// them, and the sums below carry them).
float maxOfRow(const float *row, int64_t n);

/// The sum of exp(row[c] - shift) for c < n, without storing them: floats
/// in blocks of 1024 columns, the blocks added in double (a vocabulary's
/// 50257 classes in float would lose digits to the sum's length).
double expSumOfRow(const float *row, int64_t n, float shift);

/// out[c] = scale exp(row[c] - shift) for c < n (out may be row).
void expScaledRow(const float *row, float *out, int64_t n, float shift,
                  float scale);

/// dx[c] = y[c] (dy[c] - sum_k dy[k] y[k]) for c < n: a softmax's
/// gradient from its output y and its output's gradient dy (dx may be dy).
/// The sum runs in float over blocks of 1024 columns, the blocks added in
/// double, as expSumOfRow's.
void softmaxGradRow(const float *y, const float *dy, float *dx, int64_t n);

/// dx[c] = dy[c] - exp(y[c]) sum_k dy[k] for c < n: a log-softmax's
/// gradient from its output y (dx may be dy); exp is expApprox's.
void logSoftmaxGradRow(const float *y, const float *dy, float *dx, int64_t n);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_SOFTMAXROWS_H
