#include "StageHandoff.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using namespace gpipe::runtime;

// Random messages through a ring of two buffers, the sender and the
// receiver on their own threads at uneven paces: every message arrives,
// in order, unchanged.
TEST(StageHandoff, DeliversEveryMessageInOrder) {
  constexpr int64_t kBytes = 64;
  constexpr int kMessages = 500;
  StageHandoff link(kBytes);
  std::mt19937 rng(11);
  std::vector<std::vector<char>> sent(kMessages, std::vector<char>(kBytes));
  for (auto &m : sent)
    for (char &c : m)
      c = static_cast<char>(rng());
  std::thread sender([&] {
    std::mt19937 pace(1);
    for (const auto &m : sent) {
      char *buffer = link.acquireFree();
      ASSERT_NE(buffer, nullptr);
      std::memcpy(buffer, m.data(), kBytes);
      link.publish();
      if (pace() % 7 == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  std::mt19937 pace(2);
  for (int i = 0; i < kMessages; ++i) {
    const char *buffer = link.acquireFull();
    ASSERT_NE(buffer, nullptr);
    EXPECT_EQ(std::memcmp(buffer, sent[i].data(), kBytes), 0) << i;
    link.release();
    if (pace() % 5 == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  sender.join();
}

// The sender runs at most the ring's buffers ahead of the receiver.
TEST(StageHandoff, SenderWaitsForAFreeBuffer) {
  StageHandoff link(8, 2);
  ASSERT_NE(link.acquireFree(), nullptr);
  link.publish();
  ASSERT_NE(link.acquireFree(), nullptr);
  link.publish();
  std::atomic<bool> third{false};
  std::thread sender([&] {
    if (link.acquireFree())
      third = true;
    link.publish();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(third.load()); // both buffers full
  ASSERT_NE(link.acquireFull(), nullptr);
  link.release();
  sender.join();
  EXPECT_TRUE(third.load());
}

// abort() wakes a receiver (and a sender) that waits: a failed stage never
// leaves its neighbours blocked; they get null.
TEST(StageHandoff, AbortWakesEveryWaiter) {
  StageHandoff link(8, 1);
  ASSERT_NE(link.acquireFree(), nullptr);
  link.publish();
  const char *got = reinterpret_cast<const char *>(1);
  char *free = reinterpret_cast<char *>(1);
  StageHandoff empty(8, 1);
  std::thread receiver([&] { got = empty.acquireFull(); });
  std::thread sender([&] { free = link.acquireFree(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  empty.abort();
  link.abort();
  receiver.join();
  sender.join();
  EXPECT_EQ(got, nullptr);
  EXPECT_EQ(free, nullptr);
}
