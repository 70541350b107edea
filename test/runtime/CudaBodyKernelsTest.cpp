// The CUDA backend's body kernels (runtime/lib/cuda/kernels) run on the
// host through a host launcher and compared with the CPU backend's oneDNN
// kernels on random tensors: the same kernel classes, index arithmetic and
// math as on the GPU, checked without one (only the launch itself, a
// grid-stride loop, differs).
#include "cpu/CpuBackend.h"
#include "cuda/kernels/BodyKernels.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {

/// Runs bodies as plain loops over host memory.
struct HostLauncher {
  template <class Body> void launch(int64_t n, const Body &body) const {
    for (int64_t i = 0; i < n; ++i)
      body(i);
  }
  DeviceBuffer allocate(int64_t bytes) const {
    char *p =
        static_cast<char *>(std::calloc(static_cast<size_t>(bytes) + 16, 1));
    return DeviceBuffer(p, [](char *q) { std::free(q); });
  }
  void copy(void *dst, const void *src, int64_t bytes) const {
    std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void toHost(void *dst, const void *src, int64_t bytes) const {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
};

using Shape = std::vector<int64_t>;

/// A kernel table entry over one arena, run by both backends.
class Case : public test::KernelSpecBuilder<Case> {
public:
  using KernelSpecBuilder::KernelSpecBuilder;
  Case &recomputed() {
    spec.strings["gpipe.recompute"] = "1";
    return *this;
  }

  /// Runs the CPU kernel and the body kernel on the same random arena and
  /// compares every tensor afterwards (results and updated operands).
  void check(bool update = true, double tolerance = 2e-5) {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> positive(0.5f, 1.5f);
    std::vector<char> arena(static_cast<size_t>(arenaBytes()), 0);
    for (const TensorSlot &t : spec.operands) {
      char *p = arena.data() + t.offset;
      if (t.dtype == DType::I64) {
        auto *labels = reinterpret_cast<int64_t *>(p);
        for (int64_t i = 0; i < t.numElements(); ++i)
          labels[i] = i == 1 ? -100 : static_cast<int64_t>(rng() % classes);
        continue;
      }
      auto *f = reinterpret_cast<float *>(p);
      for (int64_t i = 0; i < t.numElements(); ++i)
        f[i] = t.name == "var" ? positive(rng) : normal(rng);
    }
    std::vector<char> expected = arena, actual = arena;
    bool updateState = update;
    RandomState random{42, 3, 1};
    KernelMemory cpuMem{expected.data(), expected.data(), false, &updateState,
                        &random};
    KernelMemory bodyMem{actual.data(), actual.data(), false, &updateState,
                         &random};
    cpu::CpuBackend cpu("cpu:0");
    cpu.createKernel(spec, cpuMem)->run();
    auto body = cuda::createBodyKernel(HostLauncher{}, spec, bodyMem);
    ASSERT_NE(body, nullptr) << spec.kind;
    body->run();
    for (const std::vector<TensorSlot> *list : {&spec.operands, &spec.results})
      for (const TensorSlot &t : *list) {
        if (t.dtype != DType::F32)
          continue;
        const float *e = reinterpret_cast<float *>(expected.data() + t.offset);
        const float *a = reinterpret_cast<float *>(actual.data() + t.offset);
        double worst = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < t.numElements(); ++i) {
          double d = std::abs(static_cast<double>(e[i]) - a[i]) /
                     (1.0 + std::abs(static_cast<double>(e[i])));
          if (!(d <= worst)) {
            worst = d;
            at = i;
          }
        }
        EXPECT_LE(worst, tolerance)
            << spec.kind << " '" << t.name << "' element " << at << ": CPU "
            << e[at] << ", GPU body " << a[at];
      }
  }

  int64_t classes = 10;
};

TEST(CudaBodyKernels, Dropout) {
  for (const char *kind : {"dropout", "dropout_grad"}) {
    Case c(kind);
    c.operand(std::string(kind) == "dropout" ? "input" : "grad_output",
              {4, 1000});
    c.result(std::string(kind) == "dropout" ? "output" : "grad_input",
             {4, 1000});
    c.number("ratio", {0.3}).number("stream", {7});
    if (std::string(kind) == "dropout")
      c.number("training", {1});
    c.check();
    if (std::string(kind) == "dropout")
      c.check(/*update=*/false);
  }
}

TEST(CudaBodyKernels, Softmax) {
  for (const char *kind : {"softmax", "log_softmax"})
    for (auto [shape, axis] :
         {std::pair<Shape, int>{{6, 50}, -1}, {{3, 7, 5}, 1}, {{3, 7, 5}, 0}}) {
      Case c(kind);
      c.operand("input", shape).result("output", shape);
      c.number("axis", {static_cast<double>(axis)}).check();
    }
  for (const char *kind : {"softmax_grad", "log_softmax_grad"}) {
    Shape shape{4, 6, 9};
    Case c(kind);
    c.operand("grad_output", shape).operand("output", shape);
    c.result("grad_input", shape).number("axis", {2}).check();
  }
}

TEST(CudaBodyKernels, LayerNorm) {
  for (bool bias : {true, false}) {
    Case c("layer_norm");
    c.operand("input", {4, 6, 32}).operand("scale", {32});
    if (bias)
      c.operand("bias", {32});
    c.result("output", {4, 6, 32});
    c.number("axis", {-1}).number("epsilon", {1e-5}).check();
  }
  Case g("layer_norm_grad");
  g.operand("grad_output", {5, 3, 16}).operand("input", {5, 3, 16});
  g.operand("scale", {3, 16});
  g.result("grad_input", {5, 3, 16}).result("grad_scale", {3, 16});
  g.result("grad_bias", {3, 16});
  g.number("axis", {1}).number("epsilon", {1e-5}).check(true, 1e-4);
  // More rows than one partial sum of the parameters' gradients holds
  // (150: two whole chunks and a part).
  Case many("layer_norm_grad");
  many.operand("grad_output", {3, 50, 8}).operand("input", {3, 50, 8});
  many.operand("scale", {8});
  many.result("grad_input", {3, 50, 8}).result("grad_scale", {8});
  many.result("grad_bias", {8});
  many.number("axis", {2}).number("epsilon", {1e-5}).check(true, 1e-4);
}

Case batchNorm(const Shape &shape, bool training) {
  Shape channel{shape[1]};
  Case c("batch_norm");
  c.operand("input", shape).operand("scale", channel).operand("bias", channel);
  c.operand("mean", channel).operand("var", channel);
  c.result("output", shape).result("saved_mean", channel);
  c.result("saved_var", channel);
  c.number("epsilon", {1e-5}).number("momentum", {0.9});
  c.number("training", {training ? 1.0 : 0.0});
  return c;
}

TEST(CudaBodyKernels, BatchNorm) {
  // One chunk per channel, many chunks, rank 2.
  for (const Shape &shape :
       {Shape{8, 5, 6, 7}, Shape{16, 3, 40, 40}, Shape{64, 10}}) {
    batchNorm(shape, true).check(/*update=*/true, 1e-4);
    batchNorm(shape, true).check(/*update=*/false);
    batchNorm(shape, true).recomputed().check(true, 1e-4);
  }
  batchNorm({8, 5, 6, 7}, false).check();
}

TEST(CudaBodyKernels, BatchNormGrad) {
  for (bool training : {true, false})
    for (const Shape &shape : {Shape{8, 5, 6, 7}, Shape{16, 3, 40, 40}}) {
      Shape channel{shape[1]};
      Case c("batch_norm_grad");
      c.operand("grad_output", shape).operand("input", shape);
      c.operand("scale", channel).operand("mean", channel);
      c.operand("var", channel);
      c.result("grad_input", shape).result("grad_scale", channel);
      c.result("grad_bias", channel);
      c.number("epsilon", {1e-5}).number("training", {training ? 1.0 : 0.0});
      // grad_scale sums 25600 products of random signs to about 0.03: both
      // backends' float sums are off by ~1e-3 of it, in different orders.
      c.check(true, 2e-3);
    }
}

TEST(CudaBodyKernels, CrossEntropy) {
  Case f("softmax_cross_entropy");
  f.operand("logits", {13, 10}).operand("labels", {13}, DType::I64);
  f.result("loss", {}).number("ignore_index", {-100}).check();
  Case g("softmax_cross_entropy_grad");
  g.operand("grad_loss", {}).operand("logits", {13, 10});
  g.operand("labels", {13}, DType::I64);
  g.result("grad_logits", {13, 10}).number("ignore_index", {-100}).check();
}

TEST(CudaBodyKernels, CrossEntropyBadLabel) {
  Case f("softmax_cross_entropy");
  f.operand("logits", {4, 3}).operand("labels", {4}, DType::I64);
  f.result("loss", {}).number("ignore_index", {-100});
  std::vector<char> arena(1024, 0);
  auto *labels =
      reinterpret_cast<int64_t *>(arena.data() + f.spec.operands[1].offset);
  labels[2] = 7;
  KernelMemory mem{arena.data(), arena.data()};
  auto kernel = cuda::createBodyKernel(HostLauncher{}, f.spec, mem);
  try {
    kernel->run();
    FAIL() << "a label outside the classes was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_STREQ(e.what(), "label 7 of row 2 is outside [0, 3)");
  }
}

Case pool(const std::string &kind, const Shape &in, const Shape &out,
          const Shape &kernel, const Shape &strides, const Shape &pads,
          bool includePad = false, Shape dilations = {}) {
  Case c(kind);
  bool grad = kind.size() > 5 && kind.substr(kind.size() - 5) == "_grad";
  bool max = kind.rfind("max", 0) == 0;
  if (grad) {
    c.operand("grad_output", out);
    if (max)
      c.operand("input", in);
    c.result("grad_input", in);
  } else {
    c.operand("input", in).result("output", out);
  }
  auto list = [](const Shape &s) {
    return std::vector<double>(s.begin(), s.end());
  };
  c.number("kernel_shape", list(kernel)).number("strides", list(strides));
  c.number("pads", list(pads)).number("ceil_mode", {0});
  if (max) {
    if (dilations.empty())
      dilations.assign(kernel.size(), 1);
    c.number("dilations", list(dilations));
  } else {
    c.number("count_include_pad", {includePad ? 1.0 : 0.0});
  }
  return c;
}

TEST(CudaBodyKernels, Pooling) {
  for (const char *kind :
       {"max_pool", "max_pool_grad", "avg_pool", "avg_pool_grad"}) {
    bool max = std::string(kind).rfind("max", 0) == 0;
    pool(kind, {2, 3, 8, 8}, {2, 3, 4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0})
        .check();
    // 3x3, stride 2, padding 1 (ResNet's stem), overlapping windows.
    pool(kind, {2, 4, 9, 9}, {2, 4, 5, 5}, {3, 3}, {2, 2}, {1, 1, 1, 1})
        .check();
    // A ceil_mode window that runs past the end.
    pool(kind, {1, 2, 7, 7}, {1, 2, 4, 4}, {2, 2}, {2, 2}, {0, 0, 0, 0})
        .check();
    // One spatial axis; dilation for max pooling.
    if (max)
      pool(kind, {2, 3, 10}, {2, 3, 6}, {3}, {1}, {0, 0}, false, {2}).check();
    else
      pool(kind, {2, 3, 10}, {2, 3, 5}, {3}, {2}, {1, 1}, true).check();
    // Three spatial axes.
    pool(kind, {1, 2, 4, 6, 6}, {1, 2, 2, 3, 3}, {2, 2, 2}, {2, 2, 2},
         {0, 0, 0, 0, 0, 0})
        .check();
  }
  Case g("global_avg_pool");
  g.operand("input", {2, 5, 6, 6}).result("output", {2, 5, 1, 1}).check();
}

} // namespace
