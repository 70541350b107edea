// The attention kernels' tile products against sums in double: every
// combination of transposes, sizes that end inside a vector (the AVX-512
// and AVX2 loops' masked columns: a block of 16 with 12 left, 7, 1; their
// single-row tail) and sizes past their limits (oneDNN's sgemm), with beta
// 0 and 1 and rows wider than the matrix.
#include "cpu/kernels/SmallGemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace gpipe::runtime;

namespace {

void check(char ta, char tb, int64_t m, int64_t n, int64_t k, float beta) {
  std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 17 + k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Rows 3 floats wider than the matrices: leading dimensions are used.
  int64_t lda = (ta == 'T' ? m : k) + 3, ldb = (tb == 'T' ? k : n) + 3,
          ldc = n + 3;
  std::vector<float> a((ta == 'T' ? k : m) * lda), b((tb == 'T' ? n : k) * ldb),
      c(m * ldc);
  for (float &x : a)
    x = normal(rng);
  for (float &x : b)
    x = normal(rng);
  for (float &x : c)
    x = normal(rng);
  std::vector<float> before = c;
  cpu::tileGemm("test", ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta,
                c.data(), ldc);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = beta * double(before[i * ldc + j]), size = 0;
      for (int64_t p = 0; p < k; ++p) {
        double x = ta == 'T' ? a[p * lda + i] : a[i * lda + p];
        double y = tb == 'T' ? b[j * ldb + p] : b[p * ldb + j];
        want += x * y;
        size += std::abs(x * y);
      }
      // k float products and sums: a few k float epsilons of the terms.
      ASSERT_NEAR(c[i * ldc + j], want, 4 * (k + 1) * 6e-8 * (size + 1))
          << ta << tb << " " << m << "x" << n << "x" << k << " at " << i << ","
          << j;
    }
}

TEST(CpuSmallGemm, EveryTransposeAndTailMatchesDouble) {
  for (char ta : {'N', 'T'})
    for (char tb : {'N', 'T'})
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{16, 16, 16},
                             {5, 7, 3},
                             {13, 33, 20},
                             {6, 12, 9},
                             {9, 28, 5},
                             {32, 32, 32},
                             {64, 64, 64},
                             {70, 130, 16}})
        for (float beta : {0.0f, 1.0f})
          check(ta, tb, m, n, k, beta);
}

} // namespace
