#include "DeviceTurn.h"
#include "Transport.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

using namespace gpipe::runtime;

// Three stages share a device; their instructions' turns interleave (stage
// s holds turns s, s+3, s+6). Each thread starts its instructions at once,
// so without the turns they would run in whatever order the threads wake.
TEST(DeviceTurn, RunsTheStagesOfADeviceInTheTurnsOrder) {
  DeviceTurn turns;
  std::mutex mutex;
  std::vector<int64_t> ran;
  std::vector<std::thread> stages;
  for (int64_t s = 2; s >= 0; --s)
    stages.emplace_back([&, s] {
      for (int64_t turn = s; turn < 9; turn += 3) {
        turns.acquire(turn);
        {
          std::lock_guard<std::mutex> lock(mutex);
          ran.push_back(turn);
        }
        turns.release();
      }
    });
  for (std::thread &t : stages)
    t.join();
  std::vector<int64_t> expected{0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(ran, expected);
}

TEST(DeviceTurn, AbortWakesTheWaitersWithTheReason) {
  DeviceTurn turns;
  std::string caught;
  std::thread waiter([&] {
    try {
      turns.acquire(1); // turn 0 never runs
    } catch (const TransportError &e) {
      caught = e.what();
    }
  });
  turns.abort("stage 0 failed");
  turns.abort("a second reason is not kept");
  waiter.join();
  EXPECT_NE(caught.find("stage 0 failed"), std::string::npos) << caught;
  EXPECT_THROW(turns.acquire(0), TransportError);
}

TEST(DeviceTurn, ResetStartsANewStepAtTurnZero) {
  DeviceTurn turns;
  turns.acquire(0);
  turns.release();
  turns.acquire(1);
  turns.release();
  turns.abort("failed step");
  turns.reset();
  turns.acquire(0); // returns at once: turn 0 is next, the abort forgotten
  turns.release();
  SUCCEED();
}
