#include "SmallGemm.h"

#include "OneDnn.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GPIPE_HAVE_X86_GEMM 1
#endif

namespace gpipe::runtime::cpu {

namespace {

/// Products up to this many multiply-adds run in the AVX-512 loop below:
/// measured on an AVX-512 Xeon (one core), oneDNN's sgemm took 0.43 us at
/// 16^3 (4096) and ran at 128 GFLOP/s at 64^3; the loop wins below about
/// 32^3.
constexpr int64_t kSmallWork = 32 * 32 * 32;
/// B's rows (k) and columns (n) the loop holds: a transposed B is copied
/// into a k x n block of this size first.
constexpr int64_t kSmallSide = 64;

#ifdef GPIPE_HAVE_X86_GEMM
/// C rows [i, i + R) x columns [j, j + 16) (`cols` of them valid) =
/// sum over p of A(i.., p) B(p, j..) + beta C: R independent accumulators
/// hide the FMA's latency.
template <int R>
__attribute__((target("avx512f"))) inline void
rowBlock(bool ta, int64_t i, int64_t j, __mmask16 cols, int64_t k,
         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
         float *c, int64_t ldc) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] =
        beta == 0.0f
            ? _mm512_setzero_ps()
            : _mm512_mul_ps(_mm512_set1_ps(beta),
                            _mm512_maskz_loadu_ps(cols, c + (i + r) * ldc + j));
  for (int64_t p = 0; p < k; ++p) {
    __m512 row = _mm512_maskz_loadu_ps(cols, b + p * ldb + j);
    for (int r = 0; r < R; ++r) {
      float x = ta ? a[p * lda + i + r] : a[(i + r) * lda + p];
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(x), row, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(c + (i + r) * ldc + j, cols, acc[r]);
}

__attribute__((target("avx512f"))) void
smallGemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float *a,
          int64_t lda, const float *b, int64_t ldb, float beta, float *c,
          int64_t ldc) {
  // A transposed B ([n, k] rows) becomes a k x n block.
  alignas(64) float block[kSmallSide * kSmallSide];
  if (tb == 'T') {
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        block[p * n + j] = b[j * ldb + p];
    b = block;
    ldb = n;
  }
  bool transA = ta == 'T';
  for (int64_t j = 0; j < n; j += 16) {
    int64_t left = n - j;
    __mmask16 cols = left >= 16 ? static_cast<__mmask16>(0xffff)
                                : static_cast<__mmask16>((1u << left) - 1);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      rowBlock<4>(transA, i, j, cols, k, a, lda, b, ldb, beta, c, ldc);
    for (; i < m; ++i)
      rowBlock<1>(transA, i, j, cols, k, a, lda, b, ldb, beta, c, ldc);
  }
}

bool hasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#endif

} // namespace

void tileGemm(const char *kind, char ta, char tb, int64_t m, int64_t n,
              int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float beta, float *c, int64_t ldc) {
#ifdef GPIPE_HAVE_X86_GEMM
  if (m * n * k <= kSmallWork && n <= kSmallSide && k <= kSmallSide &&
      hasAvx512())
    return smallGemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
#endif
  sgemm(kind, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

} // namespace gpipe::runtime::cpu
