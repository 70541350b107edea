#include "NarrowConvPlanes.h"

#include "VectorClones.h"

#include <algorithm>
#include <cstring>

namespace gpipe::runtime::cpu {

namespace {

/// 16 floats, element-wise arithmetic (GCC's vector extension: as many
/// registers as the instruction set needs, the same results on any).
typedef float Vec16 __attribute__((vector_size(64)));
constexpr int64_t kVec = 16;
static_assert(kNarrowConvLanes == 2 * kVec, "two vectors at a time");

inline __attribute__((always_inline)) Vec16 load(const float *p) {
  Vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __attribute__((always_inline)) Vec16 splat(float x) {
  return Vec16{} + x;
}

} // namespace

GPIPE_VECTOR_CLONES
void narrowConvPlanes(const float *padded, int64_t wp, const int64_t *offsets,
                      const float *weights, int64_t taps, const float *bias,
                      int64_t channels, float *out, int64_t plane, int64_t oh,
                      int64_t ow) {
  constexpr int64_t k = kNarrowConvChannels;
  // Two vectors of a row at a time, each stored whole: a row's last ones
  // start at ow - kVec (outputs computed twice, the same both times); a
  // row shorter than a vector goes through a copy.
  int64_t last = std::max<int64_t>(ow - kVec, 0);
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; x += 2 * kVec) {
      int64_t at[2] = {std::min(x, last), std::min(x + kVec, last)};
      const float *row = padded + y * wp;
      Vec16 acc[k][2];
      for (int64_t c = 0; c < k; ++c)
        acc[c][0] = acc[c][1] = splat(bias[c]);
      for (int64_t t = 0; t < taps; ++t) {
        Vec16 a = load(row + at[0] + offsets[t]);
        Vec16 b = load(row + at[1] + offsets[t]);
        for (int64_t c = 0; c < k; ++c) {
          Vec16 w = splat(weights[c * taps + t]);
          acc[c][0] += w * a;
          acc[c][1] += w * b;
        }
      }
      for (int64_t c = 0; c < channels; ++c) {
        float *o = out + c * plane + y * ow;
        if (ow >= kVec) {
          std::memcpy(o + at[0], &acc[c][0], sizeof(Vec16));
          std::memcpy(o + at[1], &acc[c][1], sizeof(Vec16));
          continue;
        }
        float lanes[kVec];
        std::memcpy(lanes, &acc[c][0], sizeof lanes);
        std::copy_n(lanes, ow, o);
      }
    }
}

GPIPE_VECTOR_CLONES
void narrowConvTapSums(const float *g, int64_t count, const float *padded,
                       const int64_t *offsets, int64_t taps, double *sums) {
  constexpr int64_t k = kNarrowConvChannels;
  for (int64_t t = 0; t < taps; ++t) {
    const float *p = padded + offsets[t];
    for (int64_t b = 0; b < count; b += kNarrowConvBlock) {
      int64_t end = std::min(count, b + kNarrowConvBlock);
      Vec16 acc[k][2] = {};
      for (int64_t i = b; i < end; i += kNarrowConvLanes) {
        Vec16 x0 = load(p + i), x1 = load(p + i + kVec);
        for (int64_t c = 0; c < k; ++c) {
          acc[c][0] += load(g + c * count + i) * x0;
          acc[c][1] += load(g + c * count + i + kVec) * x1;
        }
      }
      for (int64_t c = 0; c < k; ++c) {
        Vec16 v = acc[c][0] + acc[c][1];
        float lanes[kVec];
        std::memcpy(lanes, &v, sizeof v);
        double s = 0;
        for (float l : lanes)
          s += l;
        sums[c * taps + t] += s;
      }
    }
  }
}

} // namespace gpipe::runtime::cpu
