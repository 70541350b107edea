#include "Random.h"

namespace gpipe::runtime {

uint64_t randomStreamKey(const RandomState &state, int64_t stream) {
  uint64_t h = randomMix(state.seed + kRandomGamma);
  h = randomMix(h ^ static_cast<uint64_t>(state.step));
  h = randomMix(h ^ static_cast<uint64_t>(state.microBatch));
  return randomMix(h ^ static_cast<uint64_t>(stream));
}

} // namespace gpipe::runtime
