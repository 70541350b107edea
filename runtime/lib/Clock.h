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

/// Adds the seconds of its scope to `*into` (nothing, and no clock read,
/// when `into` is null).
class Stopwatch {
public:
  explicit Stopwatch(double *into)
      : into(into), begin(into ? steadySeconds() : 0) {}
  ~Stopwatch() {
    if (into)
      *into += steadySeconds() - begin;
  }
  Stopwatch(const Stopwatch &) = delete;
  Stopwatch &operator=(const Stopwatch &) = delete;

private:
  double *into;
  double begin;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_CLOCK_H
