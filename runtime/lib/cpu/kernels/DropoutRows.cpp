#include "DropoutRows.h"

#include "Random.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GPIPE_HAVE_X86_DROPOUT 1
#endif

namespace gpipe::runtime::cpu {

namespace {

void scalarRange(const float *in, float *out, int64_t n, int64_t first,
                 uint64_t key, float ratio, float scale) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = randomUniform(key, first + c) >= ratio ? in[c] * scale : 0.0f;
}

#ifdef GPIPE_HAVE_X86_DROPOUT
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
#ifdef GPIPE_HAVE_X86_DROPOUT
  if (hasAvx512Dq())
    return avx512Range(in, out, n, first, key, ratio, scale);
#endif
  scalarRange(in, out, n, first, key, ratio, scale);
}

} // namespace gpipe::runtime::cpu
