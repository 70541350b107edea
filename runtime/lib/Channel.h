// Messages between two pipeline stages: one channel per direction and pair
// of neighbouring stages, one message per micro-batch.
#ifndef GPIPE_RUNTIME_CHANNEL_H
#define GPIPE_RUNTIME_CHANNEL_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace gpipe::runtime {

/// Thrown by receive() once the channel is closed because another stage
/// failed.
class ChannelClosed : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Channel {
public:
  using Message = std::vector<char>;

  /// A buffer of `bytes` for the next message, recycled from the ones the
  /// receiver gave back (no allocation once the pipeline is warm).
  Message acquire(size_t bytes);
  /// Delivers micro-batch `microBatch`'s message; never blocks.
  void send(int64_t microBatch, Message message);
  /// Waits for micro-batch `microBatch`'s message: first spinning (up to
  /// kSpinSeconds, yielding its core between looks), then blocked. A
  /// blocked thread woken from another core starts about 25 us later on a
  /// VM (a condition variable's round trip between two cores took 51 us,
  /// 4.5 on one core): once per micro-batch of a 1F1B pipeline on
  /// threads, whose stage threads otherwise idle on their own cores.
  Message receive(int64_t microBatch);
  static constexpr double kSpinSeconds = 200e-6;
  /// Gives a received message's buffer back for reuse.
  void release(Message message);
  /// Wakes every receiver with ChannelClosed (another stage failed).
  void close();
  /// Opens the channel again for the next step, dropping what is left.
  void reset();

private:
  std::mutex mutex;
  std::condition_variable ready;
  /// Counts sends and closes: a receiver spins on it before it blocks.
  std::atomic<uint64_t> events{0};
  std::map<int64_t, Message> pending;
  std::vector<Message> free;
  bool closed = false;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_CHANNEL_H
