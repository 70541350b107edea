// The counter-based random numbers of random kernels (dropout). Every
// backend draws the same numbers: the definition is here, not in a backend
// (inline and GPIPE_HD, so that GPU kernels draw them too).
#ifndef GPIPE_RUNTIME_RANDOM_H
#define GPIPE_RUNTIME_RANDOM_H

#include "HostDevice.h"

#include <cstdint>

namespace gpipe::runtime {

/// What random kernels draw from: element i of the op numbered `stream` is
/// a function of (seed, step, microBatch, stream, i) alone, so a backward
/// regenerates its forward's mask and a resumed run repeats the draws of an
/// uninterrupted one.
struct RandomState {
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t microBatch = 0;
};

/// SplitMix64's output function.
GPIPE_HD inline uint64_t randomMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// SplitMix64's increment.
constexpr uint64_t kRandomGamma = 0x9E3779B97F4A7C15ull;

/// The key of the stream numbered `stream` in this state.
uint64_t randomStreamKey(const RandomState &state, int64_t stream);

/// The uniform number in [0, 1) (24 bits) of one element of a stream:
/// SplitMix64's i-th output from the stream's key.
GPIPE_HD inline float randomUniform(uint64_t key, int64_t element) {
  uint64_t z =
      randomMix(key + static_cast<uint64_t>(element + 1) * kRandomGamma);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_RANDOM_H
