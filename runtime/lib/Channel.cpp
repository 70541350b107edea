#include "Channel.h"
#include "SpinWait.h"

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
    events.fetch_add(1, std::memory_order_release);
  }
  ready.notify_all();
}

Channel::Message Channel::receive(int64_t microBatch) {
  std::unique_lock<std::mutex> lock(mutex);
  auto arrived = [&] { return closed || pending.count(microBatch); };
  if (!arrived()) {
    auto until = std::chrono::steady_clock::now() + kSpinTime;
    uint64_t seen = events.load(std::memory_order_acquire);
    lock.unlock();
    while (true) {
      uint64_t now = spinWhileUnchanged(events, seen, until);
      lock.lock();
      if (now == seen || arrived())
        break;    // the spin's time is up, or the message came
      seen = now; // another micro-batch's message
      lock.unlock();
    }
  }
  ready.wait(lock, arrived);
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
    events.fetch_add(1, std::memory_order_release);
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
