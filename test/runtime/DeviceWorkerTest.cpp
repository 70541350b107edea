#include "DeviceWorker.h"

#include <gtest/gtest.h>

#include <omp.h>
#include <sched.h>

#include <chrono>
#include <stdexcept>
#include <thread>

using namespace gpipe::runtime;

TEST(DeviceWorker, RunsJobsOnItsPinnedThreadWithOneOpenMPThreadPerCore) {
  DeviceWorker worker({0});
  std::thread::id caller = std::this_thread::get_id(), ran;
  int cpu = -1, threads = 0;
  cpu_set_t mask;
  worker.start([&] {
    ran = std::this_thread::get_id();
    cpu = sched_getcpu();
    threads = omp_get_max_threads();
    sched_getaffinity(0, sizeof(mask), &mask);
  });
  worker.wait();
  EXPECT_NE(ran, caller);
  EXPECT_EQ(cpu, 0);
  EXPECT_EQ(threads, 1);
  EXPECT_EQ(CPU_COUNT(&mask), 1);
  EXPECT_TRUE(CPU_ISSET(0, &mask));
  // The same thread runs the next job.
  std::thread::id second;
  worker.start([&] { second = std::this_thread::get_id(); });
  worker.wait();
  EXPECT_EQ(second, ran);
}

TEST(DeviceWorker, PinsEachOpenMPThreadToOneCoreOfItsDevice) {
  cpu_set_t process;
  sched_getaffinity(0, sizeof(process), &process);
  if (!CPU_ISSET(0, &process) || !CPU_ISSET(1, &process))
    GTEST_SKIP() << "needs cores 0 and 1";
  DeviceWorker worker({0, 1});
  // Every region, also after a smaller one, runs thread t on core t alone.
  for (int threads : {2, 1, 2}) {
    int masks[2] = {-1, -1}, counts[2] = {0, 0};
    worker.start([&] {
#pragma omp parallel num_threads(threads)
      {
        cpu_set_t mask;
        sched_getaffinity(0, sizeof(mask), &mask);
        int t = omp_get_thread_num();
        counts[t] = CPU_COUNT(&mask);
        masks[t] = CPU_ISSET(t, &mask) ? t : -1;
      }
    });
    worker.wait();
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(counts[t], 1) << "thread " << t << " of " << threads;
      EXPECT_EQ(masks[t], t) << "thread " << t << " of " << threads;
    }
  }
}

TEST(DeviceWorker, WaitRethrowsWhatTheJobThrew) {
  DeviceWorker worker({});
  worker.start([] { throw std::runtime_error("stage 1 failed"); });
  EXPECT_THROW(
      {
        try {
          worker.wait();
        } catch (const std::runtime_error &e) {
          EXPECT_STREQ(e.what(), "stage 1 failed");
          throw;
        }
      },
      std::runtime_error);
  // A failed job leaves the worker usable.
  bool ran = false;
  worker.start([&] { ran = true; });
  worker.wait();
  EXPECT_TRUE(ran);
}

// Jobs back to back (the worker caught spinning for the next one) and with
// pauses longer than its spin (caught blocked) all run, each once.
TEST(DeviceWorker, RunsJobsBackToBackAndAfterPauses) {
  DeviceWorker worker({});
  int runs = 0;
  for (int i = 0; i < 2000; ++i) {
    worker.start([&] { ++runs; });
    worker.wait();
  }
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    worker.start([&] { ++runs; });
    worker.wait();
  }
  EXPECT_EQ(runs, 2005);
}
