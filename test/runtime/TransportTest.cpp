// A two-stage 1F1B bundle (compiled by gpipe-opt; the lit test
// test/tools/gpipe-run/transport.test passes it in GPIPE_TEST_TRAIN_BUNDLE)
// trained through a transport that records its traffic: every stage posts
// exactly the sends and receives of its stream in the compiler's schedule, in
// order, and pre-posts its receives before it sends or waits.
#include "InProcessTransport.h"

#include "gpipe/runtime/TrainingSession.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

using namespace gpipe::runtime;

namespace {

struct Event {
  enum Kind { PostReceive, Send, Wait } kind;
  MessageKey key;
};

/// Channels in this process, with every call recorded per stage.
class RecordingTransport : public InProcessTransport {
public:
  explicit RecordingTransport(int64_t stages)
      : InProcessTransport(stages), events(static_cast<size_t>(stages)) {}

  void postSend(const MessageKey &key, Message message) override {
    record(key.from, {Event::Send, key});
    InProcessTransport::postSend(key, std::move(message));
  }
  void postReceive(const MessageKey &key, size_t bytes) override {
    record(key.to, {Event::PostReceive, key});
    InProcessTransport::postReceive(key, bytes);
  }
  Message wait(const MessageKey &key) override {
    record(key.to, {Event::Wait, key});
    return InProcessTransport::wait(key);
  }

  std::mutex mutex;
  std::vector<std::vector<Event>> events; // per stage

private:
  void record(int64_t stage, Event e) {
    std::lock_guard<std::mutex> lock(mutex);
    events.at(static_cast<size_t>(stage)).push_back(e);
  }
};

HostTensor randomTensor(DType dtype, std::vector<int64_t> shape,
                        std::mt19937 &rng, int classes) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(t.numElements() * dtypeSize(dtype));
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (dtype == DType::I64) {
      int64_t v = std::uniform_int_distribution<int64_t>(0, classes - 1)(rng);
      std::memcpy(t.data.data() + i * 8, &v, 8);
    } else {
      float v = std::normal_distribution<float>()(rng);
      std::memcpy(t.data.data() + i * 4, &v, 4);
    }
  }
  return t;
}

TEST(RecordingTransport, PostsTheSchedulesTransfersInOrder) {
  const char *path = std::getenv("GPIPE_TEST_TRAIN_BUNDLE");
  if (!path)
    GTEST_SKIP() << "GPIPE_TEST_TRAIN_BUNDLE is not set (test/runtime/"
                    "tools/gpipe-run/transport.test compiles the bundle)";
  Bundle bundle = loadBundle(path);
  ASSERT_EQ(bundle.stages.size(), 2u);
  ASSERT_EQ(bundle.schedule.kind, "1f1b");
  auto owned = std::make_unique<RecordingTransport>(2);
  RecordingTransport &transport = *owned;
  TrainingSession session(path, std::move(owned));

  std::mt19937 rng(7);
  std::map<std::string, HostTensor> batch;
  for (const TensorSlot *slot : session.dataInputs()) {
    std::vector<int64_t> shape = slot->shape;
    shape[0] = session.batchSize();
    batch[slot->name] = randomTensor(slot->dtype, shape, rng, 2);
  }
  const int steps = 2;
  for (int i = 0; i < steps; ++i)
    EXPECT_TRUE(std::isfinite(session.step(batch)));

  for (size_t s = 0; s < 2; ++s) {
    // What the schedule lists for this stage, step after step.
    std::vector<std::pair<Event::Kind, MessageKey>> expected;
    std::vector<MessageKey> receives;
    for (const Instruction &in : bundle.schedule.streams[s].instructions) {
      if (!gpipe::isTransfer(in.op))
        continue;
      MessageKey key;
      key.microBatch = in.microBatch;
      bool activation = in.op == Instruction::Op::SendActivation ||
                        in.op == Instruction::Op::RecvActivation;
      key.kind = activation ? MessageKind::Activation : MessageKind::Gradient;
      bool send = in.op == Instruction::Op::SendActivation ||
                  in.op == Instruction::Op::SendGradient;
      key.from = send ? static_cast<int64_t>(s) : in.peer;
      key.to = send ? in.peer : static_cast<int64_t>(s);
      expected.push_back({send ? Event::Send : Event::Wait, key});
      if (!send)
        receives.push_back(key);
    }
    ASSERT_FALSE(expected.empty()) << "stage " << s;
    // Per step: every receive posted first, then the sends and waits.
    std::vector<std::pair<Event::Kind, MessageKey>> step;
    for (const MessageKey &k : receives)
      step.push_back({Event::PostReceive, k});
    step.insert(step.end(), expected.begin(), expected.end());
    const std::vector<Event> &got = transport.events[s];
    ASSERT_EQ(got.size(), step.size() * steps) << "stage " << s;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto &[kind, key] = step[i % step.size()];
      EXPECT_EQ(got[i].kind, kind) << "stage " << s << " event " << i;
      EXPECT_TRUE(got[i].key == key)
          << "stage " << s << " event " << i << ": got " << got[i].key.str()
          << ", the schedule lists " << key.str();
    }
  }
}

} // namespace
