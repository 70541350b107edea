// The CPU backend's batch normalization (its own loops over plain NCHW
// floats) against the definition computed in double: forward by the
// batch's statistics with the running statistics' update, forward by the
// running statistics (evaluation), and the gradients by the batch's and by
// fixed statistics. Shapes take both of the kernel's passes: a channel's
// runs of a map's plane (28x28, 5-D 2x3x4) and a row of many channels
// (BatchNorm1d's [N, C], 3x3 maps); one channel has a mean 1e5 times its
// spread. The same results, bit for bit, on one thread and on two.
//
// Bounds: a sum is taken in float over blocks of at most kBatchNormBlock =
// 256 elements, then in double, so its error is at most 256 eps times the
// sum of its terms' sizes (Higham's gamma_n for n = 256, the double part
// negligible). The kernel sums x - p and (x - p)^2 over a channel's n
// elements, p its first element: with A = mean |x - p| and D = mean - p,
// the mean is off by at most 256 eps A (plus its rounding to float, eps
// |mean|: the op saves and normalizes with a float mean, channel 0's 1e5
// times its spread), and the variance (x - p)^2 / n - D^2 by at most
// 256 eps (v + D^2 + 2 |D| A) plus its rounding, half of that relative
// error going into 1/sqrt(v). A normalized value is then off by its
// scale times (mean's error / std + |xhat| (variance's relative error / 2
// + 2 eps)) plus its own rounding; the input gradient a (dy - mean dy -
// xhat mean(dy xhat)) by at most 260 eps |a| (|dy| + mean |dy| + |xhat|
// mean |dy xhat|). One thread and two are compared on the two shapes
// whose work the kernel splits ({8, 16, 32, 32} by planes, {4096, 32} by
// rows); on the others both runs take one thread.
#include "cpu/CpuBackend.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {

constexpr double kEps = 1.1920929e-7; // float's epsilon
constexpr double kEpsilon = 1e-5;     // the op's
constexpr double kMomentum = 0.9;

struct Tensors {
  std::vector<int64_t> shape;
  int64_t rows = 0, channels = 0, inner = 0;
  std::vector<float> x, dy, scale, shift, mean, var;
};

Tensors draw(std::vector<int64_t> shape, unsigned seed) {
  Tensors t;
  t.shape = shape;
  t.rows = shape[0];
  t.channels = shape[1];
  t.inner = 1;
  for (size_t i = 2; i < shape.size(); ++i)
    t.inner *= shape[i];
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t count = t.rows * t.channels * t.inner;
  t.x.resize(count);
  t.dy.resize(count);
  for (int64_t n = 0; n < t.rows; ++n)
    for (int64_t c = 0; c < t.channels; ++c)
      for (int64_t i = 0; i < t.inner; ++i) {
        int64_t k = (n * t.channels + c) * t.inner + i;
        // Channel 0: a mean 1e5 times its spread (1e3 +- 1e-2); the
        // others each their own mean and spread.
        float z = normal(rng);
        t.x[k] = c == 0 ? 1000.0f + 0.01f * z
                        : 0.3f * c - 1.0f + (0.5f + 0.1f * c) * z;
        // Correlated with x, so that the gradient's term through the
        // variance is as large as the others.
        t.dy[k] = normal(rng) + 0.7f * z;
      }
  for (int64_t c = 0; c < t.channels; ++c) {
    t.scale.push_back(0.5f + normal(rng) * 0.2f);
    t.shift.push_back(normal(rng));
    t.mean.push_back(0.1f * normal(rng));
    t.var.push_back(0.5f + std::abs(normal(rng)));
  }
  return t;
}

/// The channel's mean and biased variance in double.
std::pair<double, double> reference(const Tensors &t, int64_t c) {
  double sum = 0, squares = 0, count = double(t.rows * t.inner);
  for (int64_t n = 0; n < t.rows; ++n)
    for (int64_t i = 0; i < t.inner; ++i)
      sum += t.x[(n * t.channels + c) * t.inner + i];
  double mean = sum / count;
  for (int64_t n = 0; n < t.rows; ++n)
    for (int64_t i = 0; i < t.inner; ++i) {
      double d = t.x[(n * t.channels + c) * t.inner + i] - mean;
      squares += d * d;
    }
  return {mean, squares / count};
}

/// Runs one kernel over `k`'s arena with `inputs` (operand name -> data);
/// returns the arena. Results start as garbage: every element must be
/// written.
std::vector<char>
run(test::KernelCase &k,
    const std::map<std::string, const std::vector<float> *> &inputs,
    bool update, int threads) {
  std::vector<char> arena(static_cast<size_t>(k.arenaBytes()));
  for (const TensorSlot &t : k.spec.operands)
    std::memcpy(arena.data() + t.offset, inputs.at(t.name)->data(),
                static_cast<size_t>(t.byteSize()));
  for (const TensorSlot &t : k.spec.results)
    std::fill_n(reinterpret_cast<float *>(arena.data() + t.offset),
                t.numElements(), 1e30f);
  RandomState random{1, 0, 0};
  KernelMemory mem{arena.data(), arena.data(), false, &update, &random};
  cpu::CpuBackend cpu("cpu:0");
  auto kernel = cpu.createKernel(k.spec, mem);
  int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernel->run();
  omp_set_num_threads(before);
  return arena;
}

std::vector<float> slotData(const std::vector<char> &arena,
                            const TensorSlot &t) {
  const float *f = reinterpret_cast<const float *>(arena.data() + t.offset);
  return std::vector<float>(f, f + t.numElements());
}

const TensorSlot &named(const std::vector<TensorSlot> &slots,
                        const std::string &name) {
  for (const TensorSlot &t : slots)
    if (t.name == name)
      return t;
  ADD_FAILURE() << "no slot " << name;
  return slots.front();
}

test::KernelCase forwardCase(const Tensors &t, bool training) {
  std::vector<int64_t> per{t.channels};
  test::KernelCase k("batch_norm");
  k.operand("input", t.shape)
      .operand("scale", per)
      .operand("bias", per)
      .operand("mean", per)
      .operand("var", per);
  k.result("output", t.shape)
      .result("saved_mean", per)
      .result("saved_var", per);
  k.number("epsilon", {kEpsilon})
      .number("momentum", {kMomentum})
      .number("training", {training ? 1.0 : 0.0});
  return k;
}

test::KernelCase gradientCase(const Tensors &t, bool training) {
  std::vector<int64_t> per{t.channels};
  test::KernelCase k("batch_norm_grad");
  k.operand("grad_output", t.shape)
      .operand("input", t.shape)
      .operand("scale", per)
      .operand("mean", per)
      .operand("var", per);
  k.result("grad_input", t.shape)
      .result("grad_scale", per)
      .result("grad_bias", per);
  k.number("epsilon", {kEpsilon}).number("training", {training ? 1.0 : 0.0});
  return k;
}

int64_t at(const Tensors &t, int64_t n, int64_t c, int64_t i) {
  return (n * t.channels + c) * t.inner + i;
}

void checkForward(const std::vector<int64_t> &shape) {
  SCOPED_TRACE(::testing::PrintToString(shape));
  Tensors t = draw(shape, 3);
  test::KernelCase k = forwardCase(t, true);
  std::map<std::string, const std::vector<float> *> in{{"input", &t.x},
                                                       {"scale", &t.scale},
                                                       {"bias", &t.shift},
                                                       {"mean", &t.mean},
                                                       {"var", &t.var}};
  std::vector<char> one = run(k, in, true, 1), two = run(k, in, true, 2);
  EXPECT_EQ(one, two) << "one thread and two differ";
  std::vector<float> y = slotData(one, named(k.spec.results, "output")),
                     mean = slotData(one, named(k.spec.results, "saved_mean")),
                     var = slotData(one, named(k.spec.results, "saved_var")),
                     runMean = slotData(one, named(k.spec.operands, "mean")),
                     runVar = slotData(one, named(k.spec.operands, "var"));
  double count = double(t.rows * t.inner);
  for (int64_t c = 0; c < t.channels; ++c) {
    auto [m, v] = reference(t, c);
    double pivot = t.x[at(t, 0, c, 0)], spread = 0;
    for (int64_t n = 0; n < t.rows; ++n)
      for (int64_t i = 0; i < t.inner; ++i)
        spread += std::abs(t.x[at(t, n, c, i)] - pivot);
    spread /= count;
    double shifted = m - pivot;
    double meanBound = 256 * kEps * spread + kEps * std::abs(m);
    double varBound =
        256 * kEps * (v + shifted * shifted + 2 * std::abs(shifted) * spread) +
        2 * kEps * v;
    EXPECT_NEAR(mean[c], m, meanBound) << c;
    EXPECT_NEAR(var[c], v, varBound) << c;
    EXPECT_NEAR(runMean[c], kMomentum * t.mean[c] + (1 - kMomentum) * m,
                1e-5 * (std::abs(t.mean[c]) + std::abs(m)))
        << c;
    EXPECT_NEAR(runVar[c],
                kMomentum * t.var[c] +
                    (1 - kMomentum) * v * count / (count - 1),
                1e-5 * (t.var[c] + v))
        << c;
    double invstd = 1 / std::sqrt(v + kEpsilon);
    int64_t wrong = 0;
    for (int64_t n = 0; n < t.rows; ++n)
      for (int64_t i = 0; i < t.inner; ++i) {
        int64_t e = at(t, n, c, i);
        double xhat = (t.x[e] - m) * invstd;
        double want = xhat * t.scale[c] + t.shift[c];
        double bound = std::abs(t.scale[c]) *
                           (meanBound * invstd +
                            std::abs(xhat) * (0.5 * varBound / v + 2 * kEps)) +
                       2 * kEps * std::abs(want);
        wrong += !(std::abs(y[e] - want) <= bound);
      }
    EXPECT_EQ(wrong, 0) << "channel " << c;
  }

  // Evaluating (updates off): the running statistics, which stay as
  // they were.
  std::vector<char> eval = run(k, in, false, 1);
  std::vector<float> ye = slotData(eval, named(k.spec.results, "output"));
  EXPECT_EQ(slotData(eval, named(k.spec.operands, "mean")), t.mean);
  EXPECT_EQ(slotData(eval, named(k.spec.operands, "var")), t.var);
  // An inference bundle's op likewise.
  test::KernelCase inference = forwardCase(t, false);
  std::vector<float> yi = slotData(run(inference, in, true, 1),
                                   named(inference.spec.results, "output"));
  for (int64_t c = 0; c < t.channels; ++c) {
    double a = t.scale[c] / std::sqrt(double(t.var[c]) + kEpsilon);
    int64_t wrong = 0;
    for (int64_t n = 0; n < t.rows; ++n)
      for (int64_t i = 0; i < t.inner; ++i) {
        int64_t e = at(t, n, c, i);
        double want = (t.x[e] - t.mean[c]) * a + t.shift[c];
        double bound = 4 * kEps *
                       (std::abs(t.x[e] * a) + std::abs(t.mean[c] * a) +
                        std::abs(t.shift[c]));
        wrong += !(std::abs(ye[e] - want) <= bound);
        wrong += !(std::abs(yi[e] - want) <= bound);
      }
    EXPECT_EQ(wrong, 0) << "channel " << c;
  }
}

void checkGradient(const std::vector<int64_t> &shape, bool training) {
  SCOPED_TRACE(::testing::PrintToString(shape) +
               (training ? " batch statistics" : " fixed statistics"));
  Tensors t = draw(shape, 5);
  // The statistics the forward normalized with: the batch's (rounded to
  // float, as the forward saves them) or the running ones.
  std::vector<float> mean = t.mean, var = t.var;
  if (training)
    for (int64_t c = 0; c < t.channels; ++c) {
      auto [m, v] = reference(t, c);
      mean[c] = static_cast<float>(m);
      var[c] = static_cast<float>(v);
    }
  test::KernelCase k = gradientCase(t, training);
  std::map<std::string, const std::vector<float> *> in{{"grad_output", &t.dy},
                                                       {"input", &t.x},
                                                       {"scale", &t.scale},
                                                       {"mean", &mean},
                                                       {"var", &var}};
  std::vector<char> one = run(k, in, true, 1), two = run(k, in, true, 2);
  EXPECT_EQ(one, two) << "one thread and two differ";
  std::vector<float> dx = slotData(one, named(k.spec.results, "grad_input")),
                     dScale =
                         slotData(one, named(k.spec.results, "grad_scale")),
                     dShift = slotData(one, named(k.spec.results, "grad_bias"));
  double count = double(t.rows * t.inner);
  for (int64_t c = 0; c < t.channels; ++c) {
    double invstd = 1 / std::sqrt(double(var[c]) + kEpsilon);
    double sumDy = 0, sumDyXhat = 0, absDy = 0, absDyXhat = 0;
    for (int64_t n = 0; n < t.rows; ++n)
      for (int64_t i = 0; i < t.inner; ++i) {
        int64_t e = at(t, n, c, i);
        double xhat = (t.x[e] - double(mean[c])) * invstd;
        sumDy += t.dy[e];
        sumDyXhat += t.dy[e] * xhat;
        absDy += std::abs(t.dy[e]);
        absDyXhat += std::abs(t.dy[e] * xhat);
      }
    EXPECT_NEAR(dShift[c], sumDy, 256 * kEps * absDy) << c;
    EXPECT_NEAR(dScale[c], sumDyXhat, 260 * kEps * absDyXhat) << c;
    double a = t.scale[c] * invstd;
    int64_t wrong = 0;
    for (int64_t n = 0; n < t.rows; ++n)
      for (int64_t i = 0; i < t.inner; ++i) {
        int64_t e = at(t, n, c, i);
        double xhat = (t.x[e] - double(mean[c])) * invstd;
        double want =
            training ? a * (t.dy[e] - sumDy / count - xhat * sumDyXhat / count)
                     : a * t.dy[e];
        double bound = 260 * kEps * std::abs(a) *
                       (std::abs(t.dy[e]) + absDy / count +
                        std::abs(xhat) * absDyXhat / count);
        wrong += !(std::abs(dx[e] - want) <= bound);
      }
    EXPECT_EQ(wrong, 0) << "channel " << c;
  }
}

// Shapes: runs of a map's plane (the main job's 28x28 maps with 8
// channels, and over the thread grain: 16 channels of 8 x 32 x 32 go to
// two threads), a 5-D tensor, rows of channels (3x3 maps, [N, C] with
// enough rows for two threads).
const std::vector<std::vector<int64_t>> kShapes = {
    {4, 8, 28, 28}, {8, 16, 32, 32}, {3, 5, 2, 3, 4},
    {32, 16, 3, 3}, {6, 20},         {4096, 32}};

TEST(CpuBatchNormKernels, ForwardAsDefined) {
  for (const auto &shape : kShapes)
    checkForward(shape);
}

TEST(CpuBatchNormKernels, GradientByBatchStatistics) {
  for (const auto &shape : kShapes)
    checkGradient(shape, true);
}

TEST(CpuBatchNormKernels, GradientByFixedStatistics) {
  for (const auto &shape : kShapes)
    checkGradient(shape, false);
}

} // namespace
