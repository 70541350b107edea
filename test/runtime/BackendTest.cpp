// A two-stage 1F1B bundle (compiled by gpipe-opt; the lit test
// test/tools/gpipe-run/transport.test passes it in GPIPE_TEST_TRAIN_BUNDLE)
// trained on a backend that records every call before handing it to the
// CPU backend: the stages allocate, load their code, create their kernels
// and move tensors only through their DeviceBackend, run each phase's
// kernels in the manifest's order, accumulate gradients on the device, and
// train exactly as on the runtime's own backends.
#include "DeviceBackend.h"
#include "Transport.h"
#include "cpu/CpuBackend.h"

#include "gpipe/runtime/TrainingSession.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

using namespace gpipe::runtime;

namespace {

/// What one stage's backend was asked to do.
struct Calls {
  std::vector<int64_t> allocations;
  std::vector<std::string> code;
  std::vector<std::pair<std::string, int64_t>> created; // kind, id
  std::vector<int64_t> runs;                            // kernel ids
  int64_t toDevice = 0, toHost = 0, onDevice = 0, accumulated = 0;
  int64_t synchronized = 0;
};

/// Runs a kernel of the CPU backend and records that it ran.
class RecordingKernel : public Kernel {
public:
  RecordingKernel(std::unique_ptr<Kernel> inner, int64_t id, Calls &calls)
      : inner(std::move(inner)), id(id), calls(calls) {}
  void run() override {
    calls.runs.push_back(id);
    inner->run();
  }

private:
  std::unique_ptr<Kernel> inner;
  int64_t id;
  Calls &calls;
};

/// The CPU backend with every call recorded (each stage has its own, used
/// by its own thread only).
class RecordingBackend : public DeviceBackend {
public:
  RecordingBackend(const std::string &device, Calls &calls)
      : cpu(device), calls(calls) {}
  const std::string &name() const override { return cpu.name(); }
  DeviceBuffer allocate(int64_t bytes) override {
    calls.allocations.push_back(bytes);
    return cpu.allocate(bytes);
  }
  void copyToDevice(char *dst, const void *src, int64_t bytes) override {
    ++calls.toDevice;
    cpu.copyToDevice(dst, src, bytes);
  }
  void copyToHost(void *dst, const char *src, int64_t bytes) override {
    ++calls.toHost;
    cpu.copyToHost(dst, src, bytes);
  }
  void copyOnDevice(char *dst, const char *src, int64_t bytes) override {
    ++calls.onDevice;
    cpu.copyOnDevice(dst, src, bytes);
  }
  void accumulate(float *dst, const float *src, int64_t count) override {
    ++calls.accumulated;
    cpu.accumulate(dst, src, count);
  }
  std::unique_ptr<StageCode> loadCode(const Bundle &bundle,
                                      const StageSpec &stage) override {
    calls.code.push_back(bundle.partPath(stage.library));
    return cpu.loadCode(bundle, stage);
  }
  std::unique_ptr<Kernel> createKernel(const KernelSpec &spec,
                                       const KernelMemory &memory) override {
    calls.created.push_back({spec.kind, spec.id});
    return std::make_unique<RecordingKernel>(cpu.createKernel(spec, memory),
                                             spec.id, calls);
  }
  void synchronize() override {
    ++calls.synchronized;
    cpu.synchronize();
  }

private:
  cpu::CpuBackend cpu;
  Calls &calls;
};

std::map<std::string, HostTensor> randomBatch(const TrainingSession &session,
                                              std::mt19937 &rng) {
  std::map<std::string, HostTensor> batch;
  for (const TensorSlot *slot : session.dataInputs()) {
    HostTensor t;
    t.dtype = slot->dtype;
    t.shape = slot->shape;
    t.shape[0] = session.batchSize();
    t.data.resize(t.numElements() * dtypeSize(t.dtype));
    for (int64_t i = 0; i < t.numElements(); ++i) {
      if (t.dtype == DType::I64) {
        int64_t v = std::uniform_int_distribution<int64_t>(0, 1)(rng);
        std::memcpy(t.data.data() + i * 8, &v, 8);
      } else {
        float v = std::normal_distribution<float>()(rng);
        std::memcpy(t.data.data() + i * 4, &v, 4);
      }
    }
    batch[slot->name] = std::move(t);
  }
  return batch;
}

TEST(RecordingBackend, StagesRunThroughTheirBackend) {
  const char *path = std::getenv("GPIPE_TEST_TRAIN_BUNDLE");
  if (!path)
    GTEST_SKIP() << "GPIPE_TEST_TRAIN_BUNDLE is not set (test/tools/"
                    "gpipe-run/transport.test compiles the bundle)";
  Bundle bundle = loadBundle(path);
  ASSERT_EQ(bundle.stages.size(), 2u);
  std::mutex mutex;
  std::vector<std::unique_ptr<Calls>> calls;
  BackendFactory recording = [&](const std::string &device) {
    std::lock_guard<std::mutex> lock(mutex);
    calls.push_back(std::make_unique<Calls>());
    return std::make_unique<RecordingBackend>(device, *calls.back());
  };
  TrainingSession recorded(path, nullptr, recording);
  TrainingSession plain(path);
  ASSERT_EQ(calls.size(), 2u) << "one backend per stage";

  std::mt19937 rng(11);
  const int steps = 3;
  for (int i = 0; i < steps; ++i) {
    auto batch = randomBatch(plain, rng);
    float a = recorded.step(batch), b = plain.step(batch);
    EXPECT_TRUE(std::isfinite(a));
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0)
        << "step " << i << ": the recording backend changed the loss";
  }
  auto p = recorded.parameters(), q = plain.parameters();
  ASSERT_EQ(p.size(), q.size());
  for (auto &[name, t] : p)
    EXPECT_EQ(t.data, q.at(name).data) << name;

  int64_t m = bundle.training.microBatches;
  ASSERT_GE(m, 2);
  for (size_t s = 0; s < 2; ++s) {
    const StageSpec &spec = bundle.stages[s];
    const Calls &c = *calls[s];
    // Code, parameters, one arena per phase that has its own (as large as
    // the phases sharing it need: the backward shares the forward's), the
    // stash slots.
    ASSERT_EQ(c.code.size(), 1u);
    EXPECT_EQ(c.code[0], bundle.partPath(spec.library));
    const PhaseSpec *forward = spec.phase("forward"),
                    *backward = spec.phase("backward"),
                    *optimizer = spec.phase("optimizer");
    ASSERT_TRUE(forward && backward && optimizer) << "stage " << s;
    EXPECT_EQ(backward->arenaOf, "forward") << "stage " << s;
    ASSERT_GE(c.allocations.size(), 3u);
    EXPECT_EQ(c.allocations[0], spec.parameters.size);
    EXPECT_EQ(c.allocations[1],
              std::max(forward->arenaSize, backward->arenaSize));
    EXPECT_EQ(c.allocations[2], optimizer->arenaSize);
    // Every kernel of the manifest, in its order, created once.
    std::vector<std::pair<std::string, int64_t>> kernels;
    std::vector<int64_t> stepRuns; // the kernel runs of one step
    for (const PhaseSpec &phase : spec.phases) {
      int64_t times = phase.role == "optimizer" ? 1 : m;
      for (const KernelSpec &k : phase.kernels)
        kernels.push_back({k.kind, k.id});
      for (int64_t t = 0; t < times; ++t)
        for (const KernelSpec &k : phase.kernels)
          stepRuns.push_back(k.id);
    }
    EXPECT_EQ(c.created, kernels) << "stage " << s;
    ASSERT_FALSE(stepRuns.empty()) << "stage " << s << " has no kernels";
    EXPECT_EQ(c.runs.size(), stepRuns.size() * steps) << "stage " << s;
    // Gradients of micro-batches 2..M are added on the device.
    EXPECT_EQ(c.accumulated, static_cast<int64_t>(spec.wiring.trained.size()) *
                                 (m - 1) * steps)
        << "stage " << s;
    EXPECT_GT(c.toDevice, 0);
    EXPECT_GT(c.onDevice, 0);
  }
  // The last stage reads its loss back from the device every micro-batch.
  EXPECT_GE(calls[1]->toHost, m * steps);
}

} // namespace
