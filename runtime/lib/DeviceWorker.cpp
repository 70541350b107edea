#include "DeviceWorker.h"
#include "PinThread.h"
#include "SpinWait.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

namespace gpipe::runtime {

DeviceWorker::DeviceWorker(std::vector<int> cores)
    : cores(std::move(cores)), thread([this] { loop(); }) {}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
    events.fetch_add(1, std::memory_order_release);
  }
  changed.notify_all();
  thread.join();
}

void DeviceWorker::start(std::function<void()> next) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    job = std::move(next);
    busy = true;
    error = nullptr;
    events.fetch_add(1, std::memory_order_release);
  }
  changed.notify_all();
}

void DeviceWorker::wait() {
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait(lock, [&] { return !busy; });
  if (error)
    std::rethrow_exception(error);
}

void DeviceWorker::loop() {
  if (!cores.empty()) {
    int threads = static_cast<int>(cores.size());
    omp_set_num_threads(threads);
    // One OpenMP thread per core, each pinned to its own: threads free to
    // move within the device's cores meet on one of them, and a region
    // waits for the one that shares its core (a competing process on one
    // core tripled the step; pinned, it doubles). OpenMP keeps this
    // thread's team for its later regions, so the pinning holds; a team
    // member is thread 0..n-1 of every region of at most n threads.
    pinThisThread(cores);
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
      pinThisThread({cores[omp_get_thread_num()]});
    }
  }
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    // The next step's job often comes soon (a small model's steps are a
    // few hundred microseconds): spin a while on this idle core first.
    if (!busy && !stopping) {
      uint64_t seen = events.load(std::memory_order_acquire);
      lock.unlock();
      spinWhileUnchanged(events, seen,
                         std::chrono::steady_clock::now() + kSpinTime);
      lock.lock();
    }
    changed.wait(lock, [&] { return busy || stopping; });
    if (stopping && !busy)
      return;
    std::function<void()> current = std::move(job);
    lock.unlock();
    std::exception_ptr failure;
    try {
      current();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    error = failure;
    busy = false;
    changed.notify_all();
  }
}

} // namespace gpipe::runtime
