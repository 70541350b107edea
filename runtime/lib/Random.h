// The counter-based random numbers of random kernels (dropout). Every
// backend draws the same numbers: the definition is here, not in a backend.
#ifndef GPIPE_RUNTIME_RANDOM_H
#define GPIPE_RUNTIME_RANDOM_H

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

/// The key of the stream numbered `stream` in this state.
uint64_t randomStreamKey(const RandomState &state, int64_t stream);
/// The uniform number in [0, 1) (24 bits) of one element of a stream.
float randomUniform(uint64_t key, int64_t element);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_RANDOM_H
