// Seconds on the steady clock: what the trace, the profile and the
// statistics measure with.
#ifndef GPIPE_RUNTIME_CLOCK_H
#define GPIPE_RUNTIME_CLOCK_H

#include <chrono>

namespace gpipe::runtime {

inline double steadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_CLOCK_H
