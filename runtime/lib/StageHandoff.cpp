#include "StageHandoff.h"

#include "SpinWait.h"

namespace gpipe::runtime {

StageHandoff::StageHandoff(int64_t bytes, int buffers)
    : ring(static_cast<size_t>(buffers < 1 ? 1 : buffers),
           std::vector<char>(static_cast<size_t>(bytes))) {}

template <typename Ready> bool StageHandoff::waitFor(Ready ready) {
  uint64_t seen = events.load(std::memory_order_acquire);
  auto until = std::chrono::steady_clock::now() + kSpinTime;
  while (!ready() && !aborted.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() < until) {
      seen = spinWhileUnchanged(events, seen, until);
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] {
      return ready() || aborted.load(std::memory_order_acquire);
    });
  }
  return !aborted.load(std::memory_order_acquire);
}

char *StageHandoff::acquireFree() {
  if (!waitFor([&] {
        return published.load(std::memory_order_acquire) -
                   released.load(std::memory_order_acquire) <
               ring.size();
      }))
    return nullptr;
  return ring[published.load(std::memory_order_relaxed) % ring.size()].data();
}

const char *StageHandoff::acquireFull() {
  if (!waitFor([&] {
        return released.load(std::memory_order_acquire) <
               published.load(std::memory_order_acquire);
      }))
    return nullptr;
  return ring[released.load(std::memory_order_relaxed) % ring.size()].data();
}

void StageHandoff::publish() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    published.fetch_add(1, std::memory_order_release);
    events.fetch_add(1, std::memory_order_release);
  }
  changed.notify_all();
}

void StageHandoff::release() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    released.fetch_add(1, std::memory_order_release);
    events.fetch_add(1, std::memory_order_release);
  }
  changed.notify_all();
}

void StageHandoff::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    aborted.store(true, std::memory_order_release);
    events.fetch_add(1, std::memory_order_release);
  }
  changed.notify_all();
}

} // namespace gpipe::runtime
