// The thread of one CPU pipeline device, with as many oneDNN (OpenMP)
// threads as the device has cores, each pinned to one of them (the worker's
// own thread is OpenMP's thread 0, on the first core), running the jobs it
// is given one at a time.
#ifndef GPIPE_RUNTIME_DEVICEWORKER_H
#define GPIPE_RUNTIME_DEVICEWORKER_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpipe::runtime {

class DeviceWorker {
public:
  /// `cores` empty: the whole host, unpinned, OpenMP's default threads.
  explicit DeviceWorker(std::vector<int> cores);
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker &) = delete;
  DeviceWorker &operator=(const DeviceWorker &) = delete;

  /// Starts `job` on the worker's thread.
  void start(std::function<void()> job);
  /// Waits for the job; rethrows what it threw.
  void wait();
  /// The cores the worker's threads are pinned to (empty: unpinned).
  const std::vector<int> &pinnedCores() const { return cores; }

private:
  void loop();

  std::vector<int> cores;
  std::mutex mutex;
  std::condition_variable changed;
  std::function<void()> job;
  bool busy = false, stopping = false;
  /// Counts start() and the destructor's stop: between jobs the worker
  /// spins on it a while before it blocks (SpinWait.h).
  std::atomic<uint64_t> events{0};
  std::exception_ptr error;
  std::thread thread;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_DEVICEWORKER_H
