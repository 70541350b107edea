#include "SoftmaxRows.h"

#include "VectorClones.h"

#include <algorithm>
#include <cstring>
#include <limits>

#ifdef GPIPE_HAVE_X86_ISAS
#include <immintrin.h>
#endif

namespace gpipe::runtime::cpu {

namespace {

// x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, Cephes' C1 and
// C2), exp(r) = 1 + r + r^2 P(r), 2^k by the exponent's bits. Below kLow
// the result is 0: e^-87 = 1.6e-38 is where exp(r) 2^k would become a
// subnormal float, whose arithmetic costs a microcode assist of ~100
// cycles (masked scores, -inf, come by here in every causal row), and
// next to the row's maximum (exp(0) = 1) such a term changes no sum.
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f,
                kLn2Lo = -2.12194440e-4f, kLow = -87.0f, kHigh = 88.7228394f;
constexpr float kP[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                        4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

constexpr float kInf = std::numeric_limits<float>::infinity();

float scalarScale(float *row, int64_t n, int64_t visible, float scale,
                  float offset, const float *mask) {
  float m = -kInf;
  for (int64_t c = 0; c < visible; ++c) {
    row[c] = row[c] * scale + offset + (mask ? mask[c] : 0.0f);
    m = m < row[c] ? row[c] : m;
  }
  for (int64_t c = visible; c < n; ++c)
    row[c] = -kInf;
  return m;
}

float scalarRow(float *row, int64_t n, float shift) {
  float sum = 0;
  for (int64_t c = 0; c < n; ++c) {
    row[c] = expApprox(row[c] - shift);
    sum += row[c];
  }
  return sum;
}

/// Columns summed in float before the sum moves to double.
constexpr int64_t kSumBlock = 1024;

float scalarMax(const float *row, int64_t n) {
  float m = -kInf;
  for (int64_t c = 0; c < n; ++c)
    m = m < row[c] ? row[c] : m;
  return m;
}

double scalarExpSum(const float *row, int64_t n, float shift) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    float sum = 0;
    for (int64_t c = b; c < std::min(n, b + kSumBlock); ++c)
      sum += expApprox(row[c] - shift);
    total += sum;
  }
  return total;
}

void scalarExpScaled(const float *row, float *out, int64_t n, float shift,
                     float scale) {
  for (int64_t c = 0; c < n; ++c)
    out[c] = scale * expApprox(row[c] - shift);
}

#ifdef GPIPE_HAVE_X86_ISAS
GPIPE_TARGET_AVX512 __m512 exp16(__m512 x) {
  // max(low, x) and min(high, .) return x where it is NaN.
  __m512 v = _mm512_min_ps(_mm512_set1_ps(kHigh),
                           _mm512_max_ps(_mm512_set1_ps(kLow), x));
  __m512 k = _mm512_roundscale_ps(
      _mm512_fmadd_ps(v, _mm512_set1_ps(kLog2e), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), v);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i)
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r,
                      _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512i bits = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLow), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(below, y, _mm512_setzero_ps());
}

/// The lanes of a 16-float vector that hold the `left` elements still to
/// come: all for 16 or more, none for 0 or fewer.
__mmask16 tailMask16(int64_t left) {
  return left <= 0    ? static_cast<__mmask16>(0)
         : left >= 16 ? static_cast<__mmask16>(0xffff)
                      : static_cast<__mmask16>((1u << left) - 1);
}

GPIPE_TARGET_AVX512 float avx512Row(float *row, int64_t n, float shift) {
  __m512 s = _mm512_set1_ps(shift), sum = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    __m512 y = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + c), s));
    _mm512_storeu_ps(row + c, y);
    sum = _mm512_add_ps(sum, y);
  }
  if (c < n) {
    __mmask16 m = tailMask16(n - c);
    __m512 y = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + c), s));
    _mm512_mask_storeu_ps(row + c, m, y);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, y));
  }
  return _mm512_reduce_add_ps(sum);
}

GPIPE_TARGET_AVX512 float avx512Max(const float *row, int64_t n) {
  __m512 m = _mm512_set1_ps(-kInf);
  for (int64_t c = 0; c < n; c += 16)
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(_mm512_set1_ps(-kInf),
                                              tailMask16(n - c), row + c));
  return _mm512_reduce_max_ps(m);
}

GPIPE_TARGET_AVX512 double avx512ExpSum(const float *row, int64_t n,
                                        float shift) {
  __m512 s = _mm512_set1_ps(shift);
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = b, e = std::min(n, b + kSumBlock); c < e; c += 16) {
      __mmask16 m = tailMask16(e - c);
      __m512 y = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + c), s));
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, y));
    }
    total += _mm512_reduce_add_ps(sum);
  }
  return total;
}

GPIPE_TARGET_AVX512 void avx512ExpScaled(const float *row, float *out,
                                         int64_t n, float shift, float scale) {
  __m512 s = _mm512_set1_ps(shift), k = _mm512_set1_ps(scale);
  for (int64_t c = 0; c < n; c += 16) {
    __mmask16 m = tailMask16(n - c);
    __m512 y = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + c), s));
    _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(k, y));
  }
}

GPIPE_TARGET_AVX512 float avx512Scale(float *row, int64_t n, int64_t visible,
                                      float scale, float offset,
                                      const float *mask) {
  __m512 s = _mm512_set1_ps(scale), o = _mm512_set1_ps(offset),
         m = _mm512_set1_ps(-kInf);
  for (int64_t c = 0; c < n; c += 16) {
    __mmask16 seen = tailMask16(visible - c), in = tailMask16(n - c);
    __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(seen, row + c), s, o);
    if (mask)
      x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(seen, mask + c));
    x = _mm512_mask_blend_ps(seen, _mm512_set1_ps(-kInf), x);
    _mm512_mask_storeu_ps(row + c, in, x);
    m = _mm512_max_ps(m, x);
  }
  return _mm512_reduce_max_ps(m);
}

GPIPE_TARGET_AVX2 __m256 exp8(__m256 x) {
  __m256 v = _mm256_min_ps(_mm256_set1_ps(kHigh),
                           _mm256_max_ps(_mm256_set1_ps(kLow), x));
  __m256 k = _mm256_floor_ps(
      _mm256_fmadd_ps(v, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), v);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i)
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP[i]));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r,
                      _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(kLow), _CMP_LT_OQ);
  return _mm256_blendv_ps(y, _mm256_setzero_ps(), below);
}

GPIPE_TARGET_AVX2 float avx2Row(float *row, int64_t n, float shift) {
  __m256 s = _mm256_set1_ps(shift), sum = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 y = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + c), s));
    _mm256_storeu_ps(row + c, y);
    sum = _mm256_add_ps(sum, y);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  float total = 0;
  for (float l : lanes)
    total += l;
  return total + scalarRow(row + c, n - c, shift);
}

GPIPE_TARGET_AVX2 double avx2ExpSum(const float *row, int64_t n, float shift) {
  __m256 s = _mm256_set1_ps(shift);
  double total = 0;
  int64_t c = 0;
  for (int64_t b = 0; b + 8 <= n; b += kSumBlock) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t e = std::min(n, b + kSumBlock); c + 8 <= e; c += 8)
      sum =
          _mm256_add_ps(sum, exp8(_mm256_sub_ps(_mm256_loadu_ps(row + c), s)));
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    float block = 0;
    for (float l : lanes)
      block += l;
    total += block;
  }
  return total + scalarExpSum(row + c, n - c, shift);
}

GPIPE_TARGET_AVX2 void avx2ExpScaled(const float *row, float *out, int64_t n,
                                     float shift, float scale) {
  __m256 s = _mm256_set1_ps(shift), k = _mm256_set1_ps(scale);
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(
        out + c,
        _mm256_mul_ps(k, exp8(_mm256_sub_ps(_mm256_loadu_ps(row + c), s))));
  scalarExpScaled(row + c, out + c, n - c, shift, scale);
}

#endif

/// The sum of dy[c] y[c] for c in [0, n), n <= kSumBlock, in float.
GPIPE_VECTOR_CLONES float dotBlock(const float *y, const float *dy, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c)
    sum += dy[c] * y[c];
  return sum;
}

/// The sum of dy[c] for c in [0, n), n <= kSumBlock, in float.
GPIPE_VECTOR_CLONES float sumBlock(const float *dy, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c)
    sum += dy[c];
  return sum;
}

/// dx[c] = y[c] (dy[c] - delta).
GPIPE_VECTOR_CLONES void scaledDifference(const float *y, const float *dy,
                                          float *dx, int64_t n, float delta) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c)
    dx[c] = y[c] * (dy[c] - delta);
}

/// dx[c] = dy[c] - e[c].
GPIPE_VECTOR_CLONES void difference(const float *dy, const float *e, float *dx,
                                    int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c)
    dx[c] = dy[c] - e[c];
}

} // namespace

float expApprox(float x) {
  float v = x < kLow ? kLow : x;
  v = v > kHigh ? kHigh : v;
  float k = __builtin_floorf(v * kLog2e + 0.5f);
  float r = v - k * kLn2Hi - k * kLn2Lo;
  float p = kP[0];
  for (int i = 1; i < 6; ++i)
    p = p * r + kP[i];
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  if (x != x)
    return x;
  return x < kLow ? 0.0f : y;
}

float scaleRow(float *row, int64_t n, int64_t visible, float scale,
               float offset, const float *mask) {
#ifdef GPIPE_HAVE_X86_ISAS
  if (vectorIsa() == VectorIsa::Avx512)
    return avx512Scale(row, n, visible, scale, offset, mask);
#endif
  return scalarScale(row, n, visible, scale, offset, mask);
}

float expShiftedRow(float *row, int64_t n, float shift) {
#ifdef GPIPE_HAVE_X86_ISAS
  switch (vectorIsa()) {
  case VectorIsa::Avx512:
    return avx512Row(row, n, shift);
  case VectorIsa::Avx2:
    return avx2Row(row, n, shift);
  case VectorIsa::Baseline:
    break;
  }
#endif
  return scalarRow(row, n, shift);
}

float maxOfRow(const float *row, int64_t n) {
#ifdef GPIPE_HAVE_X86_ISAS
  if (vectorIsa() == VectorIsa::Avx512)
    return avx512Max(row, n);
#endif
  return scalarMax(row, n);
}

double expSumOfRow(const float *row, int64_t n, float shift) {
#ifdef GPIPE_HAVE_X86_ISAS
  switch (vectorIsa()) {
  case VectorIsa::Avx512:
    return avx512ExpSum(row, n, shift);
  case VectorIsa::Avx2:
    return avx2ExpSum(row, n, shift);
  case VectorIsa::Baseline:
    break;
  }
#endif
  return scalarExpSum(row, n, shift);
}

void expScaledRow(const float *row, float *out, int64_t n, float shift,
                  float scale) {
#ifdef GPIPE_HAVE_X86_ISAS
  switch (vectorIsa()) {
  case VectorIsa::Avx512:
    return avx512ExpScaled(row, out, n, shift, scale);
  case VectorIsa::Avx2:
    return avx2ExpScaled(row, out, n, shift, scale);
  case VectorIsa::Baseline:
    break;
  }
#endif
  scalarExpScaled(row, out, n, shift, scale);
}

void softmaxGradRow(const float *y, const float *dy, float *dx, int64_t n) {
  double delta = 0;
  for (int64_t b = 0; b < n; b += kSumBlock)
    delta += dotBlock(y + b, dy + b, std::min(kSumBlock, n - b));
  scaledDifference(y, dy, dx, n, static_cast<float>(delta));
}

void logSoftmaxGradRow(const float *y, const float *dy, float *dx, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock)
    total += sumBlock(dy + b, std::min(kSumBlock, n - b));
  // exp(y) sum(dy) a block at a time, then taken off dy: dx may be dy.
  float e[kSumBlock];
  for (int64_t b = 0; b < n; b += kSumBlock) {
    int64_t len = std::min(kSumBlock, n - b);
    expScaledRow(y + b, e, len, 0.0f, static_cast<float>(total));
    difference(dy + b, e, dx + b, len);
  }
}

} // namespace gpipe::runtime::cpu
