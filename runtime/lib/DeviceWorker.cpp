#include "DeviceWorker.h"

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
    // Threads OpenMP starts from here inherit the mask.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores)
      CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    omp_set_num_threads(static_cast<int>(cores.size()));
  }
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
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
