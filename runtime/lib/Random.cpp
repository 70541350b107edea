#include "Random.h"

namespace gpipe::runtime {

namespace {
/// SplitMix64's output function.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
} // namespace

uint64_t randomStreamKey(const RandomState &state, int64_t stream) {
  uint64_t h = mix(state.seed + kGamma);
  h = mix(h ^ static_cast<uint64_t>(state.step));
  h = mix(h ^ static_cast<uint64_t>(state.microBatch));
  return mix(h ^ static_cast<uint64_t>(stream));
}

float randomUniform(uint64_t key, int64_t element) {
  // Element i of a stream is SplitMix64's i-th output from the stream's key.
  uint64_t z = mix(key + static_cast<uint64_t>(element + 1) * kGamma);
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

} // namespace gpipe::runtime
