// The CPU backend's gemm (ONNX's Gemm without its bias: the products of
// the forward and both gradients) against a float64 reference, with either
// operand transposed. A transposed left operand whose rows are multiples of
// 4 KiB (a weight gradient; 128 columns or more) goes through the backend's
// row-major copy, which all gemm kernels of a backend share: the shapes here
// leave partial tiles (32 x 32) at the edge, and two kernels of different sizes
// share one backend, the larger created second, so the buffer grows after the
// first kernel was made. In bfloat16 (compute_type "bf16") the products
// are those of the operands rounded to bfloat16, summed in float32.
#include "cpu/CpuBackend.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

using namespace gpipe::runtime;

namespace {

struct GemmCase {
  int64_t m, k, n;
  bool transA, transB;
};

/// `x` rounded to the nearest bfloat16 (ties to even), as oneDNN's
/// conversion rounds it.
double bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

/// A gemm kernel over its own arena, its operands drawn at random.
struct GemmRun {
  GemmRun(const GemmCase &g, std::mt19937 &rng, bool inBf16 = false)
      : g(g), spec("gemm"), inBf16(inBf16) {
    spec.operand("a", g.transA ? std::vector<int64_t>{g.k, g.m}
                               : std::vector<int64_t>{g.m, g.k});
    spec.operand("b", g.transB ? std::vector<int64_t>{g.n, g.k}
                               : std::vector<int64_t>{g.k, g.n});
    spec.result("output", {g.m, g.n});
    spec.number("alpha", {1.0}).number("beta", {1.0});
    spec.number("trans_a", {g.transA ? 1.0 : 0.0});
    spec.number("trans_b", {g.transB ? 1.0 : 0.0});
    spec.text("compute_type", inBf16 ? "bf16" : "f32");
    arena.resize(static_cast<size_t>(spec.arenaBytes()));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int i = 0; i < 2; ++i) {
      const TensorSlot &t = spec.spec.operands[i];
      float *p = reinterpret_cast<float *>(arena.data() + t.offset);
      for (int64_t e = 0; e < t.numElements(); ++e)
        p[e] = normal(rng);
    }
    // The result starts as garbage: every element must be written.
    std::fill_n(output(), g.m * g.n, 1e30f);
  }
  float *operand(int i) {
    return reinterpret_cast<float *>(arena.data() +
                                     spec.spec.operands[i].offset);
  }
  float *output() {
    return reinterpret_cast<float *>(arena.data() +
                                     spec.spec.results[0].offset);
  }
  std::unique_ptr<Kernel> create(cpu::CpuBackend &cpu) {
    KernelMemory mem{arena.data(), arena.data(), false,
                     &update,      &random,      &version};
    return cpu.createKernel(spec.spec, mem);
  }
  /// Elements further from the float64 product (of the operands rounded to
  /// bfloat16, in bfloat16) than float32 summation of k products can be
  /// (k units in the last place of the sum of the terms' magnitudes, the
  /// classical bound).
  int64_t wrongElements() {
    const float *a = operand(0), *b = operand(1), *c = output();
    int64_t wrong = 0;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          double x = g.transA ? a[l * g.m + i] : a[i * g.k + l];
          double y = g.transB ? b[j * g.k + l] : b[l * g.n + j];
          if (inBf16) {
            x = bf16(static_cast<float>(x));
            y = bf16(static_cast<float>(y));
          }
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        double bound = static_cast<double>(g.k) * FLT_EPSILON * magnitude;
        wrong += !(std::fabs(c[i * g.n + j] - sum) <= bound);
      }
    return wrong;
  }

  GemmCase g;
  test::KernelCase spec;
  bool inBf16;
  std::vector<char> arena;
  bool update = true;
  RandomState random{1, 0, 0};
  uint64_t version = 1;
};

/// Each product on a backend of its own, checked element by element.
template <size_t N>
void expectProducts(const GemmCase (&cases)[N], std::mt19937 &rng) {
  for (const GemmCase &g : cases) {
    cpu::CpuBackend cpu("cpu:0");
    GemmRun run(g, rng);
    run.create(cpu)->run();
    EXPECT_EQ(run.wrongElements(), 0)
        << g.m << "x" << g.k << "x" << g.n << " trans_a " << g.transA
        << " trans_b " << g.transB;
  }
}

/// Two copied products on one backend, the larger made after the smaller:
/// each runs on the shared buffer as it is when it runs.
void expectCopiesShareTheirBuffer(std::mt19937 &rng) {
  cpu::CpuBackend cpu("cpu:0");
  GemmRun small({1024, 20, 128, true, false}, rng),
      large({2048, 30, 140, true, false}, rng);
  std::unique_ptr<Kernel> first = small.create(cpu);
  std::unique_ptr<Kernel> second = large.create(cpu);
  first->run();
  second->run();
  first->run();
  EXPECT_EQ(small.wrongElements(), 0);
  EXPECT_EQ(large.wrongElements(), 0);
}

TEST(CpuMatmulKernels, GemmWithTransposedOperands) {
  std::mt19937 rng(5);
  const GemmCase cases[] = {
      {1024, 45, 130, true, false}, // copied row-major below AVX-512
      {2048, 33, 128, true, true},  // so, the right one transposed too
      {1000, 40, 200, true, false}, // rows of 4000 bytes: strided
      {1024, 40, 100, true, false}, // too few columns to copy: strided
      {37, 29, 80, false, true},    // a Linear layer's forward
      {41, 53, 72, false, false},   // its input's gradient
  };
  expectProducts(cases, rng);
  expectCopiesShareTheirBuffer(rng);
}

// The row-major copy of a transposed left operand (taken where oneDNN's
// kernels are below AVX-512): oneDNN limited to AVX2 before its first
// kernel, which only a fresh process can do (ctest runs each test in its
// own).
TEST(CpuMatmulKernels, TransposedLeftOperandCopiedBelowAvx512) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success)
    GTEST_SKIP() << "oneDNN ran kernels in this process already: run this "
                    "test alone (--gtest_filter) to exercise the copy";
  std::mt19937 rng(6);
  const GemmCase cases[] = {
      {1024, 45, 130, true, false}, // copied row-major first
      {2048, 33, 128, true, true},  // copied, the right one transposed too
  };
  expectProducts(cases, rng);
  expectCopiesShareTheirBuffer(rng);
}

// In bfloat16: the Linear layer's forward and both gradients, and a
// weight read from the parameters, whose bfloat16 copy is made again when
// the parameters' version changes (an optimizer step).
TEST(CpuMatmulKernels, Bfloat16Products) {
  if (!cpuMultipliesBf16())
    GTEST_SKIP() << "oneDNN has no bfloat16 kernels below AVX-512";
  std::mt19937 rng(7);
  const GemmCase cases[] = {
      {37, 29, 80, false, true},    // a Linear layer's forward
      {41, 53, 72, false, false},   // its input's gradient
      {1024, 45, 130, true, false}, // its weights' gradient
      {64, 1024, 256, false, true}, // a long sum
  };
  for (const GemmCase &g : cases) {
    cpu::CpuBackend cpu("cpu:0");
    GemmRun run(g, rng, /*inBf16=*/true);
    run.create(cpu)->run();
    EXPECT_EQ(run.wrongElements(), 0)
        << g.m << "x" << g.k << "x" << g.n << " trans_a " << g.transA
        << " trans_b " << g.transB;
  }
  cpu::CpuBackend cpu("cpu:0");
  GemmRun run({33, 40, 24, false, true}, rng, /*inBf16=*/true);
  run.spec.spec.operands[1].space = "params";
  std::unique_ptr<Kernel> kernel = run.create(cpu);
  kernel->run();
  EXPECT_EQ(run.wrongElements(), 0);
  float *w = run.operand(1);
  for (int64_t e = 0; e < 24 * 40; ++e)
    w[e] = -2.0f * w[e] + 0.3f;
  ++run.version;
  kernel->run();
  EXPECT_EQ(run.wrongElements(), 0) << "the weights' new version";
}

TEST(CpuMatmulKernels, Bfloat16StashGivesTheSameProducts) {
  // A tensor the backward only multiplies in bfloat16 is kept in the stash
  // as bfloat16 (the backend's roundToBf16, widened back by widenBf16): the
  // product of the widened copy equals the product of the float32 tensor
  // to the last bit. Operands with values far below and above 1, ties of
  // bfloat16's rounding and denormals.
  if (!cpuMultipliesBf16())
    GTEST_SKIP() << "oneDNN has no bfloat16 kernels below AVX-512";
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> exponent(-140, 60);
  const GemmCase cases[] = {{37, 29, 80, false, true},
                            {1024, 45, 130, true, false}};
  for (const GemmCase &g : cases)
    for (int kept = 0; kept < 2; ++kept) {
      cpu::CpuBackend cpu("cpu:0");
      GemmRun run(g, rng, /*inBf16=*/true);
      float *x = run.operand(kept);
      int64_t n = run.spec.spec.operands[kept].numElements();
      for (int64_t e = 0; e < n; ++e) {
        if (e % 7 == 0)
          x[e] = std::ldexp(x[e], exponent(rng));
        if (e % 11 == 0) { // halfway between two bfloat16 values
          uint32_t u;
          std::memcpy(&u, &x[e], sizeof u);
          u = (u & 0xffff0000u) | 0x8000u;
          std::memcpy(&x[e], &u, sizeof u);
        }
      }
      std::unique_ptr<Kernel> kernel = run.create(cpu);
      kernel->run();
      std::vector<float> direct(run.output(), run.output() + g.m * g.n);
      std::vector<char> stash(static_cast<size_t>(2 * n));
      cpu.roundToBf16(stash.data(), reinterpret_cast<const char *>(x), n);
      std::fill_n(x, n, 7.0f);
      cpu.widenBf16(reinterpret_cast<char *>(x), stash.data(), n);
      std::fill_n(run.output(), g.m * g.n, 1e30f);
      kernel->run();
      EXPECT_EQ(std::memcmp(direct.data(), run.output(),
                            direct.size() * sizeof(float)),
                0)
          << g.m << "x" << g.k << "x" << g.n << ", operand " << kept
          << " kept in bfloat16";
    }
}

// A product asked to add into its result (the number "accumulate": a
// weight gradient summed over the micro-batches where the optimizer reads
// it) gives, to the last bit, the product written apart and then added by
// the backend's accumulate(); a plain product made after it on the same
// backend still overwrites (the device's primitive attributes are not the
// accumulating kernel's). float32 and bfloat16, a weight gradient's shape
// and a Linear layer's forward.
TEST(CpuMatmulKernels, AccumulatingProductsAddAsTheSumWould) {
  std::mt19937 rng(10);
  const GemmCase cases[] = {{1024, 45, 130, true, false},
                            {37, 29, 80, false, true},
                            {256, 16, 256, true, false}};
  for (int inBf16 = 0; inBf16 < 2; ++inBf16) {
    if (inBf16 && !cpuMultipliesBf16())
      continue;
    for (const GemmCase &g : cases) {
      cpu::CpuBackend cpu("cpu:0");
      GemmRun plain(g, rng, inBf16 != 0);
      EXPECT_FALSE(cpu.canAccumulate(
          test::KernelCase(plain.spec).number("alpha", {2.0}).spec));
      GemmRun adding = plain; // the same operands
      adding.spec.number("accumulate", {1.0});
      ASSERT_TRUE(cpu.canAccumulate(adding.spec.spec));
      std::unique_ptr<Kernel> add = adding.create(cpu);
      std::unique_ptr<Kernel> product = plain.create(cpu);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> sum(static_cast<size_t>(g.m * g.n));
      for (float &v : sum)
        v = normal(rng);
      std::copy(sum.begin(), sum.end(), adding.output());
      add->run();
      product->run();
      EXPECT_EQ(plain.wrongElements(), 0) << "the plain product overwrites";
      cpu.accumulate(sum.data(), plain.output(), g.m * g.n);
      EXPECT_EQ(
          std::memcmp(sum.data(), adding.output(), sum.size() * sizeof(float)),
          0)
          << g.m << "x" << g.k << "x" << g.n << (inBf16 ? " bf16" : " f32");
    }
  }
}

TEST(CpuMatmulKernels, UnknownComputeTypeRefused) {
  std::mt19937 rng(8);
  cpu::CpuBackend cpu("cpu:0");
  GemmRun run({4, 4, 4, false, false}, rng);
  run.spec.text("compute_type", "f16");
  try {
    run.create(cpu);
    FAIL() << "an unknown compute type was accepted";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("compute_type 'f16'"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
