//===- ThreadHandoff.cpp - What a hand-off between stage threads costs ----===//
#include "gpipe/runtime/RuntimeInfo.h"

#include "Channel.h"
#include "Clock.h"
#include "DeviceTurn.h"
#include "PinThread.h"
#include "SpinWait.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace gpipe::runtime {

namespace {

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Seconds per turn of two threads on `core` taking 2000 turns in turn.
double turnPass(int core) {
  constexpr int64_t kTurns = 2000;
  DeviceTurn turns;
  double begin = 0, end = 0;
  auto stage = [&](int64_t first) {
    pinThisThread({core});
    for (int64_t t = first; t < kTurns; t += 2) {
      turns.acquire(t);
      if (t == 0)
        begin = steadySeconds();
      if (t == kTurns - 1)
        end = steadySeconds();
      turns.release();
    }
  };
  std::thread a(stage, 0), b(stage, 1);
  a.join();
  b.join();
  return (end - begin) / static_cast<double>(kTurns - 1);
}

} // namespace

ThreadHandoff measureThreadHandoff(int core, int otherCore) {
  ThreadHandoff out;
  out.spinSeconds = std::chrono::duration<double>(kSpinTime).count();
  std::vector<double> turns;
  for (int i = 0; i < 5; ++i)
    turns.push_back(turnPass(core));
  out.turnSeconds = medianOf(turns);
  // The sender waits four spins' time, on its own core, before each send:
  // the receiver has blocked by then, as a stage waiting a micro-batch's
  // work of another stage does.
  constexpr int kMessages = 60;
  Channel channel;
  std::vector<double> wakes(kMessages);
  std::thread receiver([&] {
    pinThisThread({otherCore});
    for (int i = 0; i < kMessages; ++i) {
      Channel::Message m = channel.receive(i);
      double now = steadySeconds(), sent = 0;
      std::memcpy(&sent, m.data(), sizeof sent);
      wakes[static_cast<size_t>(i)] = now - sent;
      channel.release(std::move(m));
    }
  });
  std::thread sender([&] {
    pinThisThread({core});
    for (int i = 0; i < kMessages; ++i) {
      double until = steadySeconds() + 4 * out.spinSeconds;
      while (steadySeconds() < until) {
      }
      Channel::Message m = channel.acquire(sizeof(double));
      double now = steadySeconds();
      std::memcpy(m.data(), &now, sizeof now);
      channel.send(i, std::move(m));
    }
  });
  sender.join();
  receiver.join();
  out.wakeSeconds = medianOf(wakes);
  return out;
}

} // namespace gpipe::runtime
