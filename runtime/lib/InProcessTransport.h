// The transport between stages of one process: a Channel per direction
// and pair of neighbouring stages.
#ifndef GPIPE_RUNTIME_INPROCESSTRANSPORT_H
#define GPIPE_RUNTIME_INPROCESSTRANSPORT_H

#include "Transport.h"

#include "Channel.h"

#include <memory>
#include <mutex>

namespace gpipe::runtime {

class InProcessTransport : public Transport {
public:
  /// Links between the neighbours of `stages` stages.
  explicit InProcessTransport(int64_t stages);

  Message acquire(const MessageKey &key, size_t bytes) override;
  void postSend(const MessageKey &key, Message message) override;
  void postReceive(const MessageKey &, size_t) override {}
  Message wait(const MessageKey &key) override;
  void release(const MessageKey &key, Message message) override;
  void abort(const std::string &why) override;
  void reset() override;

private:
  Channel &channel(const MessageKey &key);

  /// activations[s]: stage s to s+1; gradients[s]: stage s+1 to s;
  /// tied[from * stages + to]: tied gradients between any two stages.
  int64_t stages;
  std::vector<std::unique_ptr<Channel>> activations, gradients, tied;
  std::mutex reasonMutex;
  std::string abortReason;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_INPROCESSTRANSPORT_H
