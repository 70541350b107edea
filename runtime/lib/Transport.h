// Stage-to-stage messages: the seam between the schedule interpreter and
// how bytes reach another stage (a channel in this process; MPI for stages
// in other processes). One message per (sender, receiver, kind,
// micro-batch); each side posts in its stream's order.
#ifndef GPIPE_RUNTIME_TRANSPORT_H
#define GPIPE_RUNTIME_TRANSPORT_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// Activations go forward to the next stage, gradients back to the
/// previous one; a tied gradient (the step's gradient of a weight that
/// several stages share) goes to each other stage that shares it.
enum class MessageKind { Activation, Gradient, TiedGradient };

/// Which message: from stage `from` to stage `to`, of `kind`, for one
/// micro-batch (for a tied gradient: the shared weight's tie id). The tag a
/// transport matches sends and receives by.
struct MessageKey {
  int64_t from = 0, to = 0;
  MessageKind kind = MessageKind::Activation;
  int64_t microBatch = 0;

  bool operator==(const MessageKey &o) const {
    return from == o.from && to == o.to && kind == o.kind &&
           microBatch == o.microBatch;
  }
  /// "activations of micro-batch 3 from stage 0 to stage 1".
  std::string str() const;
};

/// A message that cannot arrive: its peer failed, or the transport was
/// aborted. The message names the peer.
class TransportError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Transport {
public:
  using Message = std::vector<char>;
  virtual ~Transport() = default;

  /// A buffer of `bytes` for the message `key` (recycled: no allocation
  /// once the pipeline is warm).
  virtual Message acquire(const MessageKey &key, size_t bytes) = 0;
  /// Sends a filled buffer; returns without waiting for the receiver.
  virtual void postSend(const MessageKey &key, Message message) = 0;
  /// Announces a receive of `bytes` before it is waited for, so that the
  /// sender never waits on an unposted receive.
  virtual void postReceive(const MessageKey &key, size_t bytes) = 0;
  /// Waits for a posted receive; throws TransportError naming the peer.
  virtual Message wait(const MessageKey &key) = 0;
  /// Gives a received message's buffer back.
  virtual void release(const MessageKey &key, Message message) = 0;
  /// Wakes every waiter with TransportError (a stage failed).
  virtual void abort(const std::string &why) = 0;
  /// Ready for the next step: drops what is left, opens again.
  virtual void reset() = 0;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TRANSPORT_H
