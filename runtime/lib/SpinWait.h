//===- SpinWait.h - A short spin before a blocking wait ---------*- C++ -*-===//
//
// A thread about to block on a condition variable first spins a while on
// a counter the notifying side bumps: a blocked thread woken from another
// core starts about 25 us later on a VM (a condition variable's round trip
// between two threads on two cores took 51 us, on one core 4.5), once per
// micro-batch of a 1F1B pipeline on threads and once per step of every
// plan. Only threads that own their cores spin (the stages' threads).
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_RUNTIME_SPINWAIT_H
#define GPIPE_RUNTIME_SPINWAIT_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace gpipe::runtime {

/// How long a thread spins before it blocks.
inline constexpr std::chrono::microseconds kSpinTime{200};

/// Spins, yielding the core between looks, until `events` holds another
/// value than `seen` or `until` passes; returns the value it last read.
inline uint64_t
spinWhileUnchanged(const std::atomic<uint64_t> &events, uint64_t seen,
                   std::chrono::steady_clock::time_point until) {
  uint64_t now = events.load(std::memory_order_acquire);
  while (now == seen && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
    now = events.load(std::memory_order_acquire);
  }
  return now;
}

/// The pause between two tests of an MPI request a thread waits on, the
/// wait begun at `since` (steady seconds, Clock.h): a yield for the wait's
/// first second, then a 50 us sleep. MPI has no progress thread here, so
/// each test advances the transfer; the waiting thread owns its core, and a
/// message under 1F1B comes a micro-batch's work later: after 1000 yields
/// (well under a millisecond) then sleeps, a message arrived up to a sleep
/// late (the demo CNN on two ranks at 32 micro-batches: 19.0 ms a step,
/// 17.7-18.3 spinning for the first second).
inline void pauseBetweenTests(double since, double now) {
  if (now - since < 1.0)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_SPINWAIT_H
