// The CPU backend's dropout loop against the definition of the draws
// (Random.h), element by element and bit for bit: whichever code the CPU
// runs (AVX-512, AVX2 or scalar), the masks are every backend's, at every
// offset into the stream and with ranges that end inside a vector.
#include "cpu/kernels/DropoutRows.h"

#include "Random.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace gpipe::runtime;

namespace {

TEST(CpuDropoutRows, EveryElementAsTheDefinitionDraws) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 7, 8, 9, 31, 1000, 4099})
    for (int64_t first : {int64_t(0), int64_t(13), int64_t(1) << 40}) {
      uint64_t key = rng();
      float ratio = n % 2 ? 0.1f : 0.5f, scale = 1.0f / (1.0f - ratio);
      std::vector<float> in(n), out(n, -1.0f);
      for (float &x : in)
        x = normal(rng);
      cpu::dropoutRange(in.data(), out.data(), n, first, key, ratio, scale);
      for (int64_t c = 0; c < n; ++c) {
        float want =
            randomUniform(key, first + c) >= ratio ? in[c] * scale : 0.0f;
        ASSERT_EQ(std::memcmp(&out[c], &want, sizeof want), 0)
            << "element " << c << " of " << n << " from " << first;
      }
    }
}

TEST(CpuDropoutRows, InPlace) {
  std::vector<float> x(100), y;
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i) + 0.5f;
  y = x;
  cpu::dropoutRange(x.data(), x.data(), 100, 3, 42, 0.3f, 1.0f / 0.7f);
  std::vector<float> z(100);
  cpu::dropoutRange(y.data(), z.data(), 100, 3, 42, 0.3f, 1.0f / 0.7f);
  EXPECT_EQ(x, z);
}

} // namespace
