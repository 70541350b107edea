#include "ParallelFor.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

using namespace gpipe::runtime;

namespace {

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float &x : v)
    x = normal(rng);
  return v;
}

class ParallelForTest : public ::testing::TestWithParam<int> {
protected:
  void SetUp() override {
    saved = omp_get_max_threads();
    omp_set_num_threads(GetParam());
  }
  void TearDown() override { omp_set_num_threads(saved); }
  int saved = 1;
};

TEST_P(ParallelForTest, CopiesEveryByteOfOddSizes) {
  // Small (one thread), large and not a multiple of the thread count.
  for (size_t bytes : {size_t(0), size_t(7), size_t(3 << 20) + 13}) {
    std::vector<char> src(bytes), dst(bytes + 1, 'x');
    for (size_t i = 0; i < bytes; ++i)
      src[i] = static_cast<char>(i * 131 + 7);
    parallelCopy(dst.data(), src.data(), bytes);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << bytes;
    EXPECT_EQ(dst[bytes], 'x') << "wrote past the end, " << bytes << " bytes";
  }
}

TEST_P(ParallelForTest, AccumulatesLikeASequentialLoop) {
  for (int64_t n : {int64_t(1), int64_t(1 << 20) + 5}) {
    std::vector<float> acc = randomFloats(n, 1), x = randomFloats(n, 2);
    std::vector<float> expected = acc;
    for (int64_t i = 0; i < n; ++i)
      expected[i] += x[i];
    parallelAccumulate(acc.data(), x.data(), n);
    EXPECT_EQ(acc, expected) << n << " elements";
  }
}

TEST_P(ParallelForTest, ChunksCoverTheRangeOnce) {
  for (int64_t n : {int64_t(0), int64_t(5), int64_t(1 << 20) + 3}) {
    std::vector<int> visits(static_cast<size_t>(n), 0);
    parallelChunks(n, 1000, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        ++visits[static_cast<size_t>(i)];
    });
    EXPECT_TRUE(
        std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }))
        << n << " elements";
  }
}

TEST_P(ParallelForTest, WidensBfloat16Exactly) {
  // Every bfloat16 bit pattern: its float32 has the same upper half and a
  // zero lower half.
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(all.size());
  parallelWidenBf16(wide.data(), all.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &wide[i], sizeof u);
    ASSERT_EQ(u, static_cast<uint32_t>(i) << 16) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, ParallelForTest, ::testing::Values(1, 2, 3));

} // namespace
