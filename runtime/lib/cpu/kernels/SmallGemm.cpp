#include "SmallGemm.h"

#include "OneDnn.h"
#include "VectorClones.h"

#include <algorithm>

#ifdef GPIPE_HAVE_X86_ISAS
#include <immintrin.h>
#endif

namespace gpipe::runtime::cpu {

namespace {

/// Products up to this many multiply-adds run in the loops below (AVX-512,
/// or AVX2 with FMA): measured on an AVX-512 Xeon (one core), oneDNN's
/// sgemm took 0.43 us at 16^3 (4096) and ran at 128 GFLOP/s at 64^3; the
/// loop wins below about 32^3.
constexpr int64_t kSmallWork = 32 * 32 * 32;
/// B's rows (k) and columns (n) the loop holds: a transposed B is copied
/// into a k x n block of this size first.
constexpr int64_t kSmallSide = 64;

#ifdef GPIPE_HAVE_X86_ISAS
/// C rows [i, i + R) x columns [j, j + 16) (`cols` of them valid) =
/// sum over p of A(i.., p) B(p, j..) + beta C: R independent accumulators
/// hide the FMA's latency.
template <int R>
GPIPE_TARGET_AVX512 inline void
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

/// A transposed B ([n, k] rows) as a k x n block; returns where B is now.
inline const float *untransposed(char tb, int64_t n, int64_t k, const float *b,
                                 int64_t &ldb, float *block) {
  if (tb != 'T')
    return b;
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j)
      block[p * n + j] = b[j * ldb + p];
  ldb = n;
  return block;
}

GPIPE_TARGET_AVX512 void smallGemm(char ta, char tb, int64_t m, int64_t n,
                                   int64_t k, const float *a, int64_t lda,
                                   const float *b, int64_t ldb, float beta,
                                   float *c, int64_t ldc) {
  alignas(64) float block[kSmallSide * kSmallSide];
  b = untransposed(tb, n, k, b, ldb, block);
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

/// 8 floats from `p`, the lanes `mask` holds (all of them with `Whole`).
template <bool Whole>
GPIPE_TARGET_AVX2 inline __m256 loadAvx2(const float *p, __m256i mask) {
  return Whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

/// The AVX2 loop's rowBlock: columns [j, j + 16) as two vectors of 8,
/// `first` and `second` the lanes of each that are valid (all ones or
/// zeros per lane; with `Whole` all 16 are, and plain loads and stores
/// run: AMD's masked stores are microcoded, tens of cycles each), 2 R
/// accumulators.
template <int R, bool Whole>
GPIPE_TARGET_AVX2 inline void
rowBlockAvx2(bool ta, int64_t i, int64_t j, __m256i first, __m256i second,
             int64_t k, const float *a, int64_t lda, const float *b,
             int64_t ldb, float beta, float *c, int64_t ldc) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) {
    float *row = c + (i + r) * ldc + j;
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    if (beta != 0.0f) {
      __m256 scale = _mm256_set1_ps(beta);
      acc[r][0] = _mm256_mul_ps(scale, loadAvx2<Whole>(row, first));
      acc[r][1] = _mm256_mul_ps(scale, loadAvx2<Whole>(row + 8, second));
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    __m256 b0 = loadAvx2<Whole>(b + p * ldb + j, first);
    __m256 b1 = loadAvx2<Whole>(b + p * ldb + j + 8, second);
    for (int r = 0; r < R; ++r) {
      __m256 x = _mm256_set1_ps(ta ? a[p * lda + i + r] : a[(i + r) * lda + p]);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float *row = c + (i + r) * ldc + j;
    if (Whole) {
      _mm256_storeu_ps(row, acc[r][0]);
      _mm256_storeu_ps(row + 8, acc[r][1]);
    } else {
      _mm256_maskstore_ps(row, first, acc[r][0]);
      _mm256_maskstore_ps(row + 8, second, acc[r][1]);
    }
  }
}

template <bool Whole>
GPIPE_TARGET_AVX2 inline void
columnsAvx2(bool ta, int64_t m, int64_t j, __m256i first, __m256i second,
            int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
            float beta, float *c, int64_t ldc) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    rowBlockAvx2<4, Whole>(ta, i, j, first, second, k, a, lda, b, ldb, beta, c,
                           ldc);
  for (; i < m; ++i)
    rowBlockAvx2<1, Whole>(ta, i, j, first, second, k, a, lda, b, ldb, beta, c,
                           ldc);
}

GPIPE_TARGET_AVX2 void smallGemmAvx2(char ta, char tb, int64_t m, int64_t n,
                                     int64_t k, const float *a, int64_t lda,
                                     const float *b, int64_t ldb, float beta,
                                     float *c, int64_t ldc) {
  alignas(64) float block[kSmallSide * kSmallSide];
  b = untransposed(tb, n, k, b, ldb, block);
  bool transA = ta == 'T';
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j = 0; j < n; j += 16) {
    int left = static_cast<int>(std::min<int64_t>(n - j, 16));
    __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
    __m256i second = _mm256_cmpgt_epi32(_mm256_set1_epi32(left - 8), lane);
    if (left == 16)
      columnsAvx2<true>(transA, m, j, first, second, k, a, lda, b, ldb, beta, c,
                        ldc);
    else
      columnsAvx2<false>(transA, m, j, first, second, k, a, lda, b, ldb, beta,
                         c, ldc);
  }
}
#endif

} // namespace

void tileGemm(const char *kind, char ta, char tb, int64_t m, int64_t n,
              int64_t k, const float *a, int64_t lda, const float *b,
              int64_t ldb, float beta, float *c, int64_t ldc) {
#ifdef GPIPE_HAVE_X86_ISAS
  if (m * n * k <= kSmallWork && n <= kSmallSide && k <= kSmallSide) {
    switch (vectorIsa()) {
    case VectorIsa::Avx512:
      return smallGemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    case VectorIsa::Avx2:
      return smallGemmAvx2(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    case VectorIsa::Baseline:
      break;
    }
  }
#endif
  sgemm(kind, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

} // namespace gpipe::runtime::cpu
