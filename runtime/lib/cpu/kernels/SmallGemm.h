// Products of small row-major matrices for the attention kernels' tiles,
// where a library call costs more than the arithmetic: a 16 x 16 x 16
// product (a short sequence's head) took 0.43 us through oneDNN's sgemm
// and is ~0.1 us of FMAs. AVX-512 or AVX2 code for the small ones,
// oneDNN's sgemm for the rest and on CPUs without either.
#ifndef GPIPE_RUNTIME_CPU_KERNELS_SMALLGEMM_H
#define GPIPE_RUNTIME_CPU_KERNELS_SMALLGEMM_H

#include <cstdint>

namespace gpipe::runtime::cpu {

/// Row-major C = op(A) op(B) + beta C, op(X) = X or X^T as `ta`, `tb` are
/// 'N' or 'T' (sgemm's convention on row-major arrays: A is m x k, or k x
/// m when transposed, with rows `lda` apart; B k x n or n x k; C m x n).
/// `kind` names the kernel in an error.
void tileGemm(const char *kind, char ta, char tb, int64_t m, int64_t n,
              int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float beta, float *c, int64_t ldc);

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_SMALLGEMM_H
