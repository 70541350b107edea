#include "Channel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

using namespace gpipe::runtime;

TEST(Channel, DeliversEachMicroBatchToItsReceiverInAnyOrder) {
  Channel channel;
  std::mt19937 rng(7);
  std::vector<int64_t> order{3, 0, 2, 1};
  std::vector<std::vector<char>> sent;
  for (int64_t mb : order) {
    Channel::Message m = channel.acquire(16 + mb);
    for (char &c : m)
      c = static_cast<char>(rng());
    sent.push_back(m);
    channel.send(mb, std::move(m));
  }
  for (int64_t mb = 0; mb < 4; ++mb) {
    Channel::Message got = channel.receive(mb);
    size_t at = std::find(order.begin(), order.end(), mb) - order.begin();
    EXPECT_EQ(got, sent[at]);
    channel.release(std::move(got));
  }
}

TEST(Channel, ReceiveWaitsForTheSendOnAnotherThread) {
  Channel channel;
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Channel::Message m = channel.acquire(3);
    m[0] = 'a';
    m[1] = 'b';
    m[2] = 'c';
    channel.send(5, std::move(m));
  });
  Channel::Message got = channel.receive(5);
  sender.join();
  EXPECT_EQ(std::string(got.begin(), got.end()), "abc");
}

TEST(Channel, RecyclesReleasedBuffers) {
  Channel channel;
  Channel::Message m = channel.acquire(1 << 16);
  const char *storage = m.data();
  channel.send(0, std::move(m));
  channel.release(channel.receive(0));
  Channel::Message again = channel.acquire(1 << 16);
  EXPECT_EQ(again.data(), storage);
}

TEST(Channel, CloseWakesAWaitingReceiverWithAnError) {
  Channel channel;
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    channel.close();
  });
  EXPECT_THROW(channel.receive(0), ChannelClosed);
  closer.join();
  channel.reset();
  channel.send(1, channel.acquire(1));
  EXPECT_EQ(channel.receive(1).size(), 1u);
}

// A receiver spins before it blocks: other micro-batches' messages that
// arrive meanwhile wake its spin without being taken, and every message
// sent back to back from another thread reaches its own receive.
TEST(Channel, SpinningReceiverTakesOnlyItsOwnMessages) {
  Channel channel;
  constexpr int64_t kMessages = 2000;
  std::thread sender([&] {
    for (int64_t mb = 0; mb < kMessages; ++mb) {
      Channel::Message m = channel.acquire(8);
      std::memcpy(m.data(), &mb, sizeof(mb));
      // Odd micro-batches first: the receiver waits for the even one.
      channel.send(mb ^ 1, std::move(m));
    }
  });
  for (int64_t mb = 0; mb < kMessages; ++mb) {
    Channel::Message got = channel.receive(mb);
    int64_t sentAs = 0;
    std::memcpy(&sentAs, got.data(), sizeof(sentAs));
    EXPECT_EQ(sentAs ^ 1, mb);
    channel.release(std::move(got));
  }
  sender.join();
}

TEST(Channel, CloseDuringTheSpinThrows) {
  for (int i = 0; i < 100; ++i) {
    Channel channel;
    std::thread closer([&] { channel.close(); });
    EXPECT_THROW(channel.receive(0), ChannelClosed);
    closer.join();
  }
}
