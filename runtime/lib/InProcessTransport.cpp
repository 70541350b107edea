#include "InProcessTransport.h"

namespace gpipe::runtime {

InProcessTransport::InProcessTransport(int64_t stages) : stages(stages) {
  for (int64_t s = 0; s + 1 < stages; ++s) {
    activations.push_back(std::make_unique<Channel>());
    gradients.push_back(std::make_unique<Channel>());
  }
  for (int64_t s = 0; s < stages * stages; ++s)
    tied.push_back(std::make_unique<Channel>());
}

Channel &InProcessTransport::channel(const MessageKey &key) {
  if (key.kind == MessageKind::TiedGradient) {
    if (key.from < 0 || key.to < 0 || key.from >= stages || key.to >= stages ||
        key.from == key.to)
      throw TransportError("no link for the " + key.str());
    return *tied[key.from * stages + key.to];
  }
  bool forward = key.kind == MessageKind::Activation;
  int64_t link = forward ? key.from : key.to;
  if (key.to - key.from != (forward ? 1 : -1) || link < 0 ||
      link >= static_cast<int64_t>(activations.size()))
    throw TransportError("no link for the " + key.str());
  return forward ? *activations[link] : *gradients[link];
}

Transport::Message InProcessTransport::acquire(const MessageKey &key,
                                               size_t bytes) {
  return channel(key).acquire(bytes);
}

void InProcessTransport::postSend(const MessageKey &key, Message message) {
  channel(key).send(key.microBatch, std::move(message));
}

Transport::Message InProcessTransport::wait(const MessageKey &key) {
  try {
    return channel(key).receive(key.microBatch);
  } catch (const ChannelClosed &) {
    std::lock_guard<std::mutex> lock(reasonMutex);
    throw TransportError("stage " + std::to_string(key.to) +
                         ": no message from stage " + std::to_string(key.from) +
                         " (" + key.str() + "): " + abortReason);
  }
}

void InProcessTransport::release(const MessageKey &key, Message message) {
  channel(key).release(std::move(message));
}

void InProcessTransport::abort(const std::string &why) {
  {
    std::lock_guard<std::mutex> lock(reasonMutex);
    if (abortReason.empty())
      abortReason = why;
  }
  for (auto &c : activations)
    c->close();
  for (auto &c : gradients)
    c->close();
  for (auto &c : tied)
    c->close();
}

void InProcessTransport::reset() {
  for (auto &c : activations)
    c->reset();
  for (auto &c : gradients)
    c->reset();
  for (auto &c : tied)
    c->reset();
}

} // namespace gpipe::runtime
