#include "Channel.h"

namespace gpipe::runtime {

Channel::Message Channel::acquire(size_t bytes) {
  Message m;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!free.empty()) {
      m = std::move(free.back());
      free.pop_back();
    }
  }
  m.resize(bytes);
  return m;
}

void Channel::send(int64_t microBatch, Message message) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    pending[microBatch] = std::move(message);
  }
  ready.notify_all();
}

Channel::Message Channel::receive(int64_t microBatch) {
  std::unique_lock<std::mutex> lock(mutex);
  ready.wait(lock, [&] { return closed || pending.count(microBatch); });
  if (closed)
    throw ChannelClosed("the pipeline stopped: another stage failed");
  auto it = pending.find(microBatch);
  Message m = std::move(it->second);
  pending.erase(it);
  return m;
}

void Channel::release(Message message) {
  std::lock_guard<std::mutex> lock(mutex);
  free.push_back(std::move(message));
}

void Channel::close() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    closed = true;
  }
  ready.notify_all();
}

void Channel::reset() {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto &[mb, m] : pending)
    free.push_back(std::move(m));
  pending.clear();
  closed = false;
}

} // namespace gpipe::runtime
