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
  /// Waits for micro-batch `microBatch`'s message: spinning a while
  /// first (SpinWait.h), then blocked.
  Message receive(int64_t microBatch);
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
