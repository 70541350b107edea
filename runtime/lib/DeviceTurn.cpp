#include "DeviceTurn.h"

#include "Transport.h"

namespace gpipe::runtime {

void DeviceTurn::acquire(int64_t turn) {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] { return aborted || next == turn; });
  if (aborted)
    throw TransportError(why);
}

void DeviceTurn::release() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++next;
  }
  changed.notify_all();
}

void DeviceTurn::abort(const std::string &reason) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!aborted)
      why = reason;
    aborted = true;
  }
  changed.notify_all();
}

void DeviceTurn::reset() {
  std::lock_guard<std::mutex> lock(mutex);
  next = 0;
  aborted = false;
  why.clear();
}

} // namespace gpipe::runtime
