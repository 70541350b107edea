#include "DropoutRows.h"

#include "Random.h"
#include "VectorClones.h"

#ifdef GPIPE_HAVE_X86_ISAS
#include <immintrin.h>
#endif

namespace gpipe::runtime::cpu {

namespace {

void scalarRange(const float *in, float *out, int64_t n, int64_t first,
                 uint64_t key, float ratio, float scale) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = randomUniform(key, first + c) >= ratio ? in[c] * scale : 0.0f;
}

#ifdef GPIPE_HAVE_X86_ISAS
/// randomUniform of 8 consecutive elements from `element`, exactly: the
/// 64-bit SplitMix64 steps lane by lane, the top 24 bits as floats.
__attribute__((target("avx512f,avx512dq"))) __m256 uniform8(uint64_t key,
                                                            int64_t element) {
  const __m512i lanes = _mm512_set_epi64(8, 7, 6, 5, 4, 3, 2, 1);
  __m512i counter = _mm512_add_epi64(_mm512_set1_epi64(element), lanes);
  __m512i z = _mm512_add_epi64(
      _mm512_set1_epi64(static_cast<int64_t>(key)),
      _mm512_mullo_epi64(
          counter, _mm512_set1_epi64(static_cast<int64_t>(kRandomGamma))));
  z = _mm512_mullo_epi64(
      _mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
      _mm512_set1_epi64(static_cast<int64_t>(0xBF58476D1CE4E5B9ull)));
  z = _mm512_mullo_epi64(
      _mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
      _mm512_set1_epi64(static_cast<int64_t>(0x94D049BB133111EBull)));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  __m256 u = _mm512_cvtepi64_ps(_mm512_srli_epi64(z, 40));
  return _mm256_mul_ps(u, _mm256_set1_ps(1.0f / 16777216.0f));
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) void
avx512Range(const float *in, float *out, int64_t n, int64_t first, uint64_t key,
            float ratio, float scale) {
  const __m256 r = _mm256_set1_ps(ratio), s = _mm256_set1_ps(scale);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __mmask8 keep = _mm256_cmp_ps_mask(uniform8(key, first + c), r, _CMP_GE_OQ);
    _mm256_storeu_ps(out + c,
                     _mm256_maskz_mul_ps(keep, _mm256_loadu_ps(in + c), s));
  }
  scalarRange(in + c, out + c, n - c, first + c, key, ratio, scale);
}

/// The low 64 bits of a x b in each lane, from AVX2's 32 x 32 -> 64-bit
/// products: lo(a) lo(b) + (hi(a) lo(b) + lo(a) hi(b)) 2^32 (mod 2^64).
GPIPE_TARGET_AVX2 inline __m256i mulLow64(__m256i a, uint64_t b) {
  const __m256i lo = _mm256_set1_epi64x(static_cast<int64_t>(b & 0xffffffffu));
  const __m256i hi = _mm256_set1_epi64x(static_cast<int64_t>(b >> 32));
  __m256i cross = _mm256_add_epi64(
      _mm256_mul_epu32(_mm256_srli_epi64(a, 32), lo), _mm256_mul_epu32(a, hi));
  return _mm256_add_epi64(_mm256_mul_epu32(a, lo),
                          _mm256_slli_epi64(cross, 32));
}

/// The top 24 bits of randomMix for the 4 elements from `element`, each in
/// the low half of its 64-bit lane.
GPIPE_TARGET_AVX2 inline __m256i top24Of4(uint64_t key, int64_t element) {
  __m256i counter = _mm256_add_epi64(_mm256_set1_epi64x(element),
                                     _mm256_setr_epi64x(1, 2, 3, 4));
  __m256i z = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(key)),
                               mulLow64(counter, kRandomGamma));
  z = mulLow64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)),
               0xBF58476D1CE4E5B9ull);
  z = mulLow64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)),
               0x94D049BB133111EBull);
  z = _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
  return _mm256_srli_epi64(z, 40);
}

/// randomUniform of 8 consecutive elements from `element`, exactly (the
/// same integers; a 24-bit integer and its scaling are exact in float).
GPIPE_TARGET_AVX2 inline __m256 uniform8Avx2(uint64_t key, int64_t element) {
  const __m256i low = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  __m256i a = _mm256_permutevar8x32_epi32(top24Of4(key, element), low);
  __m256i b = _mm256_permutevar8x32_epi32(top24Of4(key, element + 4), low);
  __m256 u = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(a, b, 0x20));
  return _mm256_mul_ps(u, _mm256_set1_ps(1.0f / 16777216.0f));
}

GPIPE_TARGET_AVX2 void avx2Range(const float *in, float *out, int64_t n,
                                 int64_t first, uint64_t key, float ratio,
                                 float scale) {
  const __m256 r = _mm256_set1_ps(ratio), s = _mm256_set1_ps(scale);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 keep = _mm256_cmp_ps(uniform8Avx2(key, first + c), r, _CMP_GE_OQ);
    _mm256_storeu_ps(
        out + c,
        _mm256_and_ps(keep, _mm256_mul_ps(_mm256_loadu_ps(in + c), s)));
  }
  scalarRange(in + c, out + c, n - c, first + c, key, ratio, scale);
}

bool hasAvx512Dq() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}
#endif

} // namespace

void dropoutRange(const float *in, float *out, int64_t n, int64_t first,
                  uint64_t key, float ratio, float scale) {
#ifdef GPIPE_HAVE_X86_ISAS
  if (hasAvx512Dq() && vectorIsa() == VectorIsa::Avx512)
    return avx512Range(in, out, n, first, key, ratio, scale);
  if (vectorIsa() != VectorIsa::Baseline)
    return avx2Range(in, out, n, first, key, ratio, scale);
#endif
  scalarRange(in, out, n, first, key, ratio, scale);
}

} // namespace gpipe::runtime::cpu
