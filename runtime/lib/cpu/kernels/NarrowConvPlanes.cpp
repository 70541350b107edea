#include "NarrowConvPlanes.h"

#include "VectorClones.h"

#include <algorithm>
#include <cstring>

// The vector helpers below are always inlined into a function of an
// instruction set that holds their vector in registers: no call passes a
// vector, so the ABI note GCC and clang give for them does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gpipe::runtime::cpu {

namespace {

// One body per loop, a template over the vector (GCC's vector extension),
// compiled in functions of each instruction set with the vector that
// instruction set holds in one register: a vector wider than the
// registers is lowered through the stack (the 16-float vector of the
// AVX-512 code, compiled for AVX2, ran a first layer of 16 channels at
// about 1 GFLOP/s: 9.4 ms of the main job's 44 ms step on two Zen 3
// cores). Each pass keeps kNarrowConvChannels x 2 vectors of sums in
// registers.
typedef float Vec16 __attribute__((vector_size(64)));
typedef float Vec8 __attribute__((vector_size(32)));
typedef float Vec4 __attribute__((vector_size(16)));

template <typename V> constexpr int64_t kLanes = sizeof(V) / sizeof(float);

template <typename V>
inline __attribute__((always_inline)) V load(const float *p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename V> inline __attribute__((always_inline)) V splat(float x) {
  return V{} + x;
}

template <typename V>
inline __attribute__((always_inline)) void
planes(const float *padded, int64_t wp, const int64_t *offsets,
       const float *weights, int64_t taps, const float *bias, int64_t channels,
       float *out, int64_t plane, int64_t oh, int64_t ow) {
  constexpr int64_t k = kNarrowConvChannels, lanes = kLanes<V>;
  // Two vectors of a row at a time, each stored whole: a row's last ones
  // start at ow - lanes (outputs computed twice, the same both times); a
  // row shorter than a vector goes through a copy.
  int64_t last = std::max<int64_t>(ow - lanes, 0);
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; x += 2 * lanes) {
      int64_t at[2] = {std::min(x, last), std::min(x + lanes, last)};
      const float *row = padded + y * wp;
      V acc[k][2];
#pragma GCC unroll 8
      for (int64_t c = 0; c < k; ++c)
        acc[c][0] = acc[c][1] = splat<V>(bias[c]);
      for (int64_t t = 0; t < taps; ++t) {
        V a = load<V>(row + at[0] + offsets[t]);
        V b = load<V>(row + at[1] + offsets[t]);
#pragma GCC unroll 8
        for (int64_t c = 0; c < k; ++c) {
          V w = splat<V>(weights[c * taps + t]);
          acc[c][0] += w * a;
          acc[c][1] += w * b;
        }
      }
#pragma GCC unroll 8
      for (int64_t c = 0; c < k; ++c) {
        if (c >= channels)
          break;
        float *o = out + c * plane + y * ow;
        if (ow >= lanes) {
          std::memcpy(o + at[0], &acc[c][0], sizeof(V));
          std::memcpy(o + at[1], &acc[c][1], sizeof(V));
          continue;
        }
        float part[lanes];
        std::memcpy(part, &acc[c][0], sizeof part);
        std::copy_n(part, ow, o);
      }
    }
}

template <typename V>
inline __attribute__((always_inline)) void
tapSums(const float *g, int64_t count, const float *padded,
        const int64_t *offsets, int64_t taps, double *sums) {
  constexpr int64_t k = kNarrowConvChannels, lanes = kLanes<V>;
  static_assert(kNarrowConvLanes % (2 * lanes) == 0,
                "a pass divides the count");
  for (int64_t t = 0; t < taps; ++t) {
    const float *p = padded + offsets[t];
    for (int64_t b = 0; b < count; b += kNarrowConvBlock) {
      int64_t end = std::min(count, b + kNarrowConvBlock);
      V acc[k][2] = {};
      for (int64_t i = b; i < end; i += 2 * lanes) {
        V x0 = load<V>(p + i), x1 = load<V>(p + i + lanes);
#pragma GCC unroll 8
        for (int64_t c = 0; c < k; ++c) {
          acc[c][0] += load<V>(g + c * count + i) * x0;
          acc[c][1] += load<V>(g + c * count + i + lanes) * x1;
        }
      }
#pragma GCC unroll 8
      for (int64_t c = 0; c < k; ++c) {
        V v = acc[c][0] + acc[c][1];
        float part[lanes];
        std::memcpy(part, &v, sizeof v);
        double s = 0;
        for (float l : part)
          s += l;
        sums[c * taps + t] += s;
      }
    }
  }
}

#ifdef GPIPE_HAVE_X86_ISAS
GPIPE_TARGET_AVX512 void planesAvx512(const float *padded, int64_t wp,
                                      const int64_t *offsets,
                                      const float *weights, int64_t taps,
                                      const float *bias, int64_t channels,
                                      float *out, int64_t plane, int64_t oh,
                                      int64_t ow) {
  planes<Vec16>(padded, wp, offsets, weights, taps, bias, channels, out, plane,
                oh, ow);
}

GPIPE_TARGET_AVX2 void planesAvx2(const float *padded, int64_t wp,
                                  const int64_t *offsets, const float *weights,
                                  int64_t taps, const float *bias,
                                  int64_t channels, float *out, int64_t plane,
                                  int64_t oh, int64_t ow) {
  planes<Vec8>(padded, wp, offsets, weights, taps, bias, channels, out, plane,
               oh, ow);
}

GPIPE_TARGET_AVX512 void tapSumsAvx512(const float *g, int64_t count,
                                       const float *padded,
                                       const int64_t *offsets, int64_t taps,
                                       double *sums) {
  tapSums<Vec16>(g, count, padded, offsets, taps, sums);
}

GPIPE_TARGET_AVX2 void tapSumsAvx2(const float *g, int64_t count,
                                   const float *padded, const int64_t *offsets,
                                   int64_t taps, double *sums) {
  tapSums<Vec8>(g, count, padded, offsets, taps, sums);
}
#endif

} // namespace

void narrowConvPlanes(const float *padded, int64_t wp, const int64_t *offsets,
                      const float *weights, int64_t taps, const float *bias,
                      int64_t channels, float *out, int64_t plane, int64_t oh,
                      int64_t ow) {
#ifdef GPIPE_HAVE_X86_ISAS
  switch (vectorIsa()) {
  case VectorIsa::Avx512:
    return planesAvx512(padded, wp, offsets, weights, taps, bias, channels, out,
                        plane, oh, ow);
  case VectorIsa::Avx2:
    return planesAvx2(padded, wp, offsets, weights, taps, bias, channels, out,
                      plane, oh, ow);
  case VectorIsa::Baseline:
    break;
  }
#endif
  planes<Vec4>(padded, wp, offsets, weights, taps, bias, channels, out, plane,
               oh, ow);
}

void narrowConvTapSums(const float *g, int64_t count, const float *padded,
                       const int64_t *offsets, int64_t taps, double *sums) {
#ifdef GPIPE_HAVE_X86_ISAS
  switch (vectorIsa()) {
  case VectorIsa::Avx512:
    return tapSumsAvx512(g, count, padded, offsets, taps, sums);
  case VectorIsa::Avx2:
    return tapSumsAvx2(g, count, padded, offsets, taps, sums);
  case VectorIsa::Baseline:
    break;
  }
#endif
  tapSums<Vec4>(g, count, padded, offsets, taps, sums);
}

} // namespace gpipe::runtime::cpu
