// The CPU backend's softmax and log-softmax gradients against sums in
// double: rows along the last axis (the runtime's own loops: attention's
// 64 keys, a tail past the vector width, a vocabulary longer than one
// block of the sum) and along an inner axis (oneDNN's primitive), each
// bounded by the error of the float arithmetic it does; an in-place
// gradient (grad_input over grad_output) gives the same values.
#include "cpu/CpuBackend.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace gpipe::runtime;

namespace {

using Shape = std::vector<int64_t>;

struct GradCase : test::KernelSpecBuilder<GradCase> {
  std::vector<char> arena;
  Shape shape;
  int64_t axis;
  bool log;

  GradCase(bool log, Shape shape, int64_t axis, bool inPlace = false)
      : KernelSpecBuilder(log ? "log_softmax_grad" : "softmax_grad"),
        shape(shape),
        // The kernel is given the axis as written (-1 counts from the
        // end); the test's own loops take it counted from the front.
        axis(axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis),
        log(log) {
    operand("grad_output", shape).operand("output", shape);
    KernelSpecBuilder::result("grad_input", shape);
    number("axis", {static_cast<double>(axis)});
    if (inPlace)
      spec.results[0].offset = spec.operands[0].offset;
    arena.assign(static_cast<size_t>(arenaBytes()), 0);
    // The output of a softmax (or log-softmax) of logits of a few units,
    // computed in double and rounded; output gradients of either sign.
    std::mt19937 rng(5);
    std::normal_distribution<double> logit(0.0, 3.0);
    std::normal_distribution<float> grad(0.0f, 1.0f);
    std::vector<double> x(static_cast<size_t>(elements()));
    for (double &v : x)
      v = logit(rng);
    forEachRow([&](const std::vector<int64_t> &at) {
      double max = -INFINITY, sum = 0;
      for (int64_t i : at)
        max = std::max(max, x[i]);
      for (int64_t i : at)
        sum += std::exp(x[i] - max);
      for (int64_t i : at)
        y()[i] = static_cast<float>(log ? x[i] - max - std::log(sum)
                                        : std::exp(x[i] - max) / sum);
    });
    for (int64_t i = 0; i < elements(); ++i)
      dy()[i] = grad(rng);
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  float *at(const TensorSlot &t) {
    return reinterpret_cast<float *>(arena.data() + t.offset);
  }
  float *dy() { return at(spec.operands[0]); }
  float *y() { return at(spec.operands[1]); }
  float *dx() { return at(spec.results[0]); }
  /// body(indices of one row along the axis), for every row.
  template <typename Body> void forEachRow(Body body) const {
    int64_t n = shape[axis], inner = 1;
    for (size_t d = axis + 1; d < shape.size(); ++d)
      inner *= shape[d];
    std::vector<int64_t> at(static_cast<size_t>(n));
    for (int64_t outer = 0; outer < elements() / (n * inner); ++outer)
      for (int64_t i = 0; i < inner; ++i) {
        for (int64_t c = 0; c < n; ++c)
          at[c] = (outer * n + c) * inner + i;
        body(at);
      }
  }
  void run() {
    KernelMemory mem{arena.data(), arena.data()};
    cpu::CpuBackend cpu("cpu:0");
    cpu.createKernel(spec, mem)->run();
  }

  /// Runs the kernel and checks each element against the gradient in
  /// double from the same float y and dy. Bound (u = 2^-24, the unit
  /// roundoff; n the row): the row's sum in float, in blocks of at most
  /// 1024 (or oneDNN's order), is off by at most n u its sum of magnitudes
  /// S (Higham's bound for recursive summation, which any order meets);
  /// softmax: y (dy - delta) then adds y n u S (y's share of delta's
  /// error) and 3 u |y| (|dy| + |delta|) for the subtraction and the
  /// product; log-softmax: dy - e^y sum adds e^y n u S and, for exp's
  /// polynomial (about 2 ulp here, oneDNN's within the same) and the
  /// product, 5 u e^y |sum|, and u |dy| for the subtraction.
  void check() {
    std::vector<float> y0(y(), y() + elements()), dy0(dy(), dy() + elements());
    run();
    const double u = std::ldexp(1.0, -24);
    double n = static_cast<double>(shape[axis]);
    forEachRow([&](const std::vector<int64_t> &at) {
      double sum = 0, magnitude = 0;
      for (int64_t i : at) {
        double term = log ? dy0[i] : double(dy0[i]) * y0[i];
        sum += term;
        magnitude += std::fabs(term);
      }
      for (int64_t i : at) {
        double want, bound;
        if (log) {
          double e = std::exp(double(y0[i]));
          want = dy0[i] - e * sum;
          bound = e * n * u * magnitude + 5 * u * e * std::fabs(sum) +
                  u * std::fabs(dy0[i]);
        } else {
          want = y0[i] * (dy0[i] - sum);
          bound = y0[i] * n * u * magnitude +
                  3 * u * y0[i] * (std::fabs(dy0[i]) + std::fabs(sum));
        }
        ASSERT_LE(std::fabs(dx()[i] - want), bound + 1e-30)
            << spec.kind << " element " << i << ": " << dx()[i] << " against "
            << want;
      }
    });
  }
};

TEST(CpuSoftmaxKernels, GradientsAlongTheLastAxis) {
  for (bool log : {false, true}) {
    // Attention's scores (a head's 64 keys), a tail past 16 lanes, and a
    // vocabulary of three sum blocks and a part.
    GradCase(log, {2, 4, 16, 64}, 3).check();
    GradCase(log, {7, 37}, 1).check();
    GradCase(log, {3, 3001}, -1).check();
  }
}

TEST(CpuSoftmaxKernels, GradientsAlongAnInnerAxis) {
  for (bool log : {false, true})
    for (int64_t axis : {0, 1})
      GradCase(log, {5, 9, 6}, axis).check();
}

TEST(CpuSoftmaxKernels, InPlaceGradientGivesTheSameValues) {
  for (bool log : {false, true}) {
    GradCase apart(log, {6, 130}, 1), over(log, {6, 130}, 1, true);
    apart.run();
    over.run();
    for (int64_t i = 0; i < apart.elements(); ++i)
      ASSERT_EQ(apart.dx()[i], over.dx()[i]) << i;
  }
}

} // namespace
