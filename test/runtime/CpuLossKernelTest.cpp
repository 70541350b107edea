// The CPU backend's softmax cross-entropy and its gradient against sums in
// double: language models' vocabularies (3001 classes, a tail past the
// vector width; GPT-2's 50257, whose sum of exponentials runs over many
// blocks) and a classifier's ten, with a row labelled with the ignore
// index; a label outside the classes is an error naming it.
#include "cpu/CpuBackend.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace gpipe::runtime;

namespace {

struct LossCase : test::KernelSpecBuilder<LossCase> {
  std::vector<char> arena;

  LossCase(bool gradient, int64_t rows, int64_t classes)
      : KernelSpecBuilder(gradient ? "softmax_cross_entropy_grad"
                                   : "softmax_cross_entropy") {
    if (gradient)
      operand("grad_loss", {});
    operand("logits", {rows, classes}).operand("labels", {rows}, DType::I64);
    if (gradient)
      KernelSpecBuilder::result("grad_logits", {rows, classes});
    else
      KernelSpecBuilder::result("loss", {});
    number("ignore_index", {-100});
    arena.assign(static_cast<size_t>(arenaBytes()), 0);
    std::mt19937 rng(11);
    // Logits of a few units, as a trained model's: exp would overflow in
    // float without the max taken off first.
    std::normal_distribution<float> normal(0.0f, 4.0f);
    for (int64_t i = 0; i < rows * classes; ++i)
      logits()[i] = normal(rng) + (i % 7 == 0 ? 60.0f : 0.0f);
    for (int64_t i = 0; i < rows; ++i)
      labels()[i] = i == 1 ? -100 : static_cast<int64_t>(rng() % classes);
    if (gradient)
      *at(spec.operands[0]) = 0.75f;
  }
  float *at(const TensorSlot &t) {
    return reinterpret_cast<float *>(arena.data() + t.offset);
  }
  float *logits() { return at(spec.operands[spec.operands.size() - 2]); }
  int64_t *labels() {
    return reinterpret_cast<int64_t *>(arena.data() +
                                       spec.operands.back().offset);
  }
  float *result() { return at(spec.results[0]); }
  void run() {
    KernelMemory mem{arena.data(), arena.data()};
    cpu::CpuBackend cpu("cpu:0");
    cpu.createKernel(spec, mem)->run();
  }
};

/// Per row: log-sum-exp in double, and the probabilities.
std::vector<double> probabilities(const float *row, int64_t classes,
                                  double &logSumExp) {
  double max = row[0];
  for (int64_t c = 1; c < classes; ++c)
    max = std::max(max, double(row[c]));
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c)
    sum += std::exp(row[c] - max);
  logSumExp = max + std::log(sum);
  std::vector<double> p(classes);
  for (int64_t c = 0; c < classes; ++c)
    p[c] = std::exp(row[c] - logSumExp);
  return p;
}

void checkLoss(int64_t rows, int64_t classes) {
  LossCase f(false, rows, classes);
  f.run();
  double total = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (f.labels()[i] == -100)
      continue;
    double lse;
    probabilities(f.logits() + i * classes, classes, lse);
    total += lse - f.logits()[i * classes + f.labels()[i]];
    ++counted;
  }
  double expected = total / counted;
  // Each row's log-probability in float: a relative error of a few float
  // epsilons of the logits' size (up to ~80), ~1e-5 of a loss of ~10.
  EXPECT_NEAR(*f.result(), expected, 1e-5 * std::abs(expected) + 1e-5)
      << rows << "x" << classes;
}

void checkGradient(int64_t rows, int64_t classes) {
  LossCase g(true, rows, classes);
  g.run();
  int64_t counted = rows - 1; // row 1 is ignored
  double scale = 0.75 / counted;
  for (int64_t i = 0; i < rows; ++i) {
    const float *dx = g.result() + i * classes;
    if (g.labels()[i] == -100) {
      for (int64_t c = 0; c < classes; ++c)
        ASSERT_EQ(dx[c], 0.0f) << "ignored row " << i << " class " << c;
      continue;
    }
    double lse;
    std::vector<double> p =
        probabilities(g.logits() + i * classes, classes, lse);
    for (int64_t c = 0; c < classes; ++c) {
      double expected = scale * (p[c] - (c == g.labels()[i] ? 1.0 : 0.0));
      // Probabilities in float: relative 1e-5 of each, and of the scale
      // (the largest entry) for those near 0 or 1.
      ASSERT_NEAR(dx[c], expected, 1e-5 * std::abs(expected) + 1e-6 * scale)
          << "row " << i << " class " << c;
    }
  }
}

TEST(CpuLossKernel, CrossEntropyMatchesDouble) {
  checkLoss(13, 10);
  checkLoss(64, 3001);
  checkLoss(6, 50257);
}

TEST(CpuLossKernel, GradientMatchesDouble) {
  checkGradient(13, 10);
  checkGradient(64, 3001);
  checkGradient(6, 50257);
}

TEST(CpuLossKernel, LabelOutsideTheClasses) {
  LossCase f(false, 4, 3);
  f.labels()[2] = 7;
  try {
    f.run();
    FAIL() << "a label outside the classes was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_STREQ(e.what(), "label 7 of row 2 is outside [0, 3)");
  }
}

} // namespace
