// The CPU backend's tiled attention and its gradient against the direct
// definition in double (the whole score matrix, softmax by rows): more
// queries and keys than a tile (64) and not a multiple of it, a causal mask,
// an additive mask broadcast over the batch with hidden keys, and dropout
// on the weights (the reference applies the draws of Random.h).
#include "cpu/CpuBackend.h"

#include "KernelSpecBuilder.h"
#include "Random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

using namespace gpipe::runtime;

namespace {

/// Problem sizes: `batch` x `heads` stacked problems of tq queries and tk
/// keys of d features, values of dv.
struct Sizes {
  int64_t batch, heads, tq, tk, d, dv;
  bool causal = false, mask = false;
  float dropout = 0;
};

/// The random state and stream of the dropout cases.
const RandomState kRandom{/*seed=*/9, /*step=*/4, /*microBatch=*/1};
constexpr int64_t kStream = 3;

struct AttentionCase : test::KernelSpecBuilder<AttentionCase> {
  Sizes n;
  std::vector<char> arena;

  AttentionCase(const Sizes &n, bool gradient)
      : KernelSpecBuilder(gradient ? "attention_grad" : "attention"), n(n) {
    if (gradient)
      operand("grad_output", {n.batch, n.heads, n.tq, n.dv});
    operand("query", {n.batch, n.heads, n.tq, n.d})
        .operand("key", {n.batch, n.heads, n.tk, n.d})
        .operand("value", {n.batch, n.heads, n.tk, n.dv});
    if (gradient)
      operand("output", {n.batch, n.heads, n.tq, n.dv})
          .operand("logsumexp", {n.batch, n.heads, n.tq});
    if (n.mask)
      operand("mask", {1, n.heads, n.tq, n.tk});
    if (gradient)
      result("grad_query", {n.batch, n.heads, n.tq, n.d})
          .result("grad_key", {n.batch, n.heads, n.tk, n.d})
          .result("grad_value", {n.batch, n.heads, n.tk, n.dv});
    else
      result("output", {n.batch, n.heads, n.tq, n.dv})
          .result("logsumexp", {n.batch, n.heads, n.tq});
    number("scale", {1.0 / std::sqrt(double(n.d))});
    number("causal", {n.causal ? 1.0 : 0.0});
    number("dropout_ratio", {n.dropout});
    number("stream", {n.dropout > 0 ? double(kStream) : -1.0});
    arena.assign(static_cast<size_t>(arenaBytes()), 0);
  }
  float *operandData(const std::string &name) {
    for (const TensorSlot &t : spec.operands)
      if (t.name == name)
        return reinterpret_cast<float *>(arena.data() + t.offset);
    ADD_FAILURE() << "no operand " << name;
    return nullptr;
  }
  float *resultData(size_t i) {
    return reinterpret_cast<float *>(arena.data() + spec.results[i].offset);
  }
  int64_t count(const std::string &name) {
    for (const TensorSlot &t : spec.operands)
      if (t.name == name)
        return t.numElements();
    return 0;
  }
  void fill(const std::string &name, std::mt19937 &rng, float spread) {
    std::normal_distribution<float> normal(0.0f, spread);
    float *x = operandData(name);
    for (int64_t i = 0, e = count(name); i < e; ++i)
      x[i] = normal(rng);
  }
  void run() {
    KernelMemory mem{arena.data(), arena.data()};
    mem.random = &kRandom;
    cpu::CpuBackend cpu("cpu:0");
    cpu.createKernel(spec, mem)->run();
  }
};

/// The direct definition in double, of the inputs the float kernels read.
struct Reference {
  Sizes n;
  std::vector<double> out, lse, dq, dk, dv;

  Reference(const Sizes &n, const float *q, const float *k, const float *v,
            const float *mask, const float *dOut)
      : n(n) {
    int64_t stack = n.batch * n.heads;
    out.assign(stack * n.tq * n.dv, 0);
    lse.assign(stack * n.tq, 0);
    dq.assign(stack * n.tq * n.d, 0);
    dk.assign(stack * n.tk * n.d, 0);
    dv.assign(stack * n.tk * n.dv, 0);
    double scale = 1.0 / std::sqrt(double(n.d));
    uint64_t key = randomStreamKey(kRandom, kStream);
    // The dropout's factor of weight (s, i, j): 0 or 1 / (1 - ratio).
    auto dropped = [&](int64_t s, int64_t i, int64_t j) {
      if (n.dropout == 0)
        return 1.0;
      return randomUniform(key, (s * n.tq + i) * n.tk + j) >= n.dropout
                 ? 1.0 / (1.0 - double(float(n.dropout)))
                 : 0.0;
    };
    for (int64_t s = 0; s < stack; ++s) {
      int64_t head = s % n.heads;
      std::vector<double> p(n.tq * n.tk), dp(n.tq * n.tk);
      for (int64_t i = 0; i < n.tq; ++i) {
        double max = -INFINITY;
        for (int64_t j = 0; j < n.tk; ++j) {
          double x = 0;
          for (int64_t c = 0; c < n.d; ++c)
            x += double(q[(s * n.tq + i) * n.d + c]) *
                 k[(s * n.tk + j) * n.d + c];
          x *= scale;
          if (mask)
            x += mask[(head * n.tq + i) * n.tk + j];
          if (n.causal && j > i)
            x = -INFINITY;
          p[i * n.tk + j] = x;
          max = std::max(max, x);
        }
        double sum = 0;
        for (int64_t j = 0; j < n.tk; ++j)
          sum += std::exp(p[i * n.tk + j] - max);
        lse[s * n.tq + i] = max + std::log(sum);
        for (int64_t j = 0; j < n.tk; ++j)
          p[i * n.tk + j] = std::exp(p[i * n.tk + j] - lse[s * n.tq + i]);
        for (int64_t c = 0; c < n.dv; ++c)
          for (int64_t j = 0; j < n.tk; ++j)
            out[(s * n.tq + i) * n.dv + c] += p[i * n.tk + j] *
                                              dropped(s, i, j) *
                                              v[(s * n.tk + j) * n.dv + c];
      }
      if (!dOut)
        continue;
      for (int64_t i = 0; i < n.tq; ++i) {
        double dot = 0;
        for (int64_t j = 0; j < n.tk; ++j) {
          double x = 0;
          for (int64_t c = 0; c < n.dv; ++c)
            x += double(dOut[(s * n.tq + i) * n.dv + c]) *
                 v[(s * n.tk + j) * n.dv + c];
          x *= dropped(s, i, j);
          dp[i * n.tk + j] = x;
          dot += p[i * n.tk + j] * x;
        }
        for (int64_t j = 0; j < n.tk; ++j) {
          double pij = p[i * n.tk + j];
          double ds = pij * (dp[i * n.tk + j] - dot) * scale;
          for (int64_t c = 0; c < n.d; ++c) {
            dq[(s * n.tq + i) * n.d + c] += ds * k[(s * n.tk + j) * n.d + c];
            dk[(s * n.tk + j) * n.d + c] += ds * q[(s * n.tq + i) * n.d + c];
          }
          for (int64_t c = 0; c < n.dv; ++c)
            dv[(s * n.tk + j) * n.dv + c] +=
                pij * dropped(s, i, j) * dOut[(s * n.tq + i) * n.dv + c];
        }
      }
    }
  }
};

/// Every element within `bound` of the largest reference element: each
/// result is a sum of at most max(Tk, Tq) + D float products (and an
/// exponential per term, accurate to a few ulps), whose rounding is a few
/// times (Tk + D) float epsilons (6e-8) of the sum of its terms' sizes; the
/// terms here are of the result's size or smaller, so (130 + 32) x 6e-8
/// ~ 1e-5 bounds the worst case.
void expectClose(const float *got, const std::vector<double> &want,
                 const char *what, double bound = 2e-5) {
  double largest = 0;
  for (double w : want)
    largest = std::max(largest, std::abs(w));
  ASSERT_GT(largest, 0) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], bound * largest) << what << " element " << i;
}

/// A mask of 0 and -inf (every 7th key of a row hidden, never all of a
/// row's) plus small offsets, per head, broadcast over the batch.
void fillMask(AttentionCase &c, std::mt19937 &rng) {
  std::uniform_real_distribution<float> offset(-1.0f, 1.0f);
  float *m = c.operandData("mask");
  for (int64_t i = 0, e = c.count("mask"); i < e; ++i)
    m[i] = (i * 5 + i / c.n.tk) % 7 == 0
               ? -std::numeric_limits<float>::infinity()
               : offset(rng);
}

void check(const Sizes &n) {
  std::mt19937 rng(7);
  AttentionCase f(n, false);
  // Scores of a few units, as a trained model's.
  f.fill("query", rng, 1.5f);
  f.fill("key", rng, 1.5f);
  f.fill("value", rng, 1.0f);
  if (n.mask)
    fillMask(f, rng);
  f.run();
  Reference ref(n, f.operandData("query"), f.operandData("key"),
                f.operandData("value"),
                n.mask ? f.operandData("mask") : nullptr, nullptr);
  expectClose(f.resultData(0), ref.out, "output");
  expectClose(f.resultData(1), ref.lse, "logsumexp");

  AttentionCase g(n, true);
  for (const char *name : {"query", "key", "value"})
    std::copy_n(f.operandData(name), f.count(name), g.operandData(name));
  if (n.mask)
    std::copy_n(f.operandData("mask"), f.count("mask"), g.operandData("mask"));
  std::copy_n(f.resultData(0), f.count("query") / n.d * n.dv,
              g.operandData("output"));
  std::copy_n(f.resultData(1), f.count("query") / n.d,
              g.operandData("logsumexp"));
  g.fill("grad_output", rng, 1.0f);
  g.run();
  Reference grad(
      n, g.operandData("query"), g.operandData("key"), g.operandData("value"),
      n.mask ? g.operandData("mask") : nullptr, g.operandData("grad_output"));
  expectClose(g.resultData(0), grad.dq, "grad_query");
  expectClose(g.resultData(1), grad.dk, "grad_key");
  expectClose(g.resultData(2), grad.dv, "grad_value");
}

TEST(CpuAttentionKernels, OneTileMatchesDouble) { check({1, 2, 5, 7, 4, 3}); }

TEST(CpuAttentionKernels, CausalOverSeveralTilesMatchesDouble) {
  Sizes n{2, 3, 130, 130, 32, 16};
  n.causal = true;
  check(n);
}

TEST(CpuAttentionKernels, DropoutOnTheWeightsMatchesDouble) {
  Sizes n{2, 2, 130, 130, 16, 8};
  n.causal = true;
  n.dropout = 0.25f;
  check(n);
}

TEST(CpuAttentionKernels, BroadcastMaskMatchesDouble) {
  Sizes n{2, 2, 70, 130, 16, 24};
  n.mask = true;
  check(n);
}

} // namespace
