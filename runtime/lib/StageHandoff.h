//===- StageHandoff.h - Activations from one stage's thread to the next
//----===//
//
// Pipelined inference passes each micro-batch's activations from a stage's
// thread to the next stage's through a ring of message buffers: the sender
// packs into a free buffer while the receiver unpacks the one before, so a
// stage runs its next micro-batch while the next stage runs this one. A
// waiting thread spins a while before it blocks (SpinWait.h: the stages'
// threads own their cores). abort() wakes every waiter: a stage that
// failed never leaves its neighbours waiting.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_RUNTIME_STAGEHANDOFF_H
#define GPIPE_RUNTIME_STAGEHANDOFF_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gpipe::runtime {

class StageHandoff {
public:
  /// `buffers` messages of `bytes` each in flight at most.
  StageHandoff(int64_t bytes, int buffers = 2);
  StageHandoff(const StageHandoff &) = delete;
  StageHandoff &operator=(const StageHandoff &) = delete;

  /// The sender: a free buffer to pack (null once aborted), then publish().
  char *acquireFree();
  void publish();
  /// The receiver: the oldest published buffer (null once aborted), then
  /// release() once unpacked.
  const char *acquireFull();
  void release();
  /// Wakes both sides; their acquire calls return null from now on.
  void abort();

private:
  /// Waits until `ready()` or abort; false if aborted.
  template <typename Ready> bool waitFor(Ready ready);

  std::vector<std::vector<char>> ring;
  /// Buffers published and released so far (the next to fill is
  /// published % size, the next to read released % size).
  std::atomic<uint64_t> published{0}, released{0};
  std::atomic<bool> aborted{false};
  /// Bumped by every publish, release and abort (what a spinning waiter
  /// watches).
  std::atomic<uint64_t> events{0};
  std::mutex mutex;
  std::condition_variable changed;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_STAGEHANDOFF_H
