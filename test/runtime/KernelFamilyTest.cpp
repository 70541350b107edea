#include "gpipe/common/KernelFamily.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using gpipe::KernelFamily;
using gpipe::KernelPlanes;
using gpipe::KernelTiming;

TEST(KernelFamily, NamesAreUniqueAndFound) {
  std::set<std::string_view> names;
  for (const KernelFamily *f = gpipe::kernelFamiliesBegin();
       f != gpipe::kernelFamiliesEnd(); ++f) {
    EXPECT_TRUE(names.insert(f->name).second) << f->name;
    EXPECT_EQ(gpipe::findKernelFamily(f->name), f);
  }
  EXPECT_EQ(gpipe::findKernelFamily("no_such_family"), nullptr);
  EXPECT_EQ(gpipe::findKernelFamily(""), nullptr);
}

// A family priced by another's fit reaches, in a few steps and without a
// cycle, one that is calibrated by itself, of the same timing: a FLOP-timed
// kernel is never priced by a bytes-only fit, whose FLOP coefficient is 0.
TEST(KernelFamily, NearestChainsEndInAFamilyOfTheSameTiming) {
  size_t count = gpipe::kernelFamiliesEnd() - gpipe::kernelFamiliesBegin();
  for (const KernelFamily *f = gpipe::kernelFamiliesBegin();
       f != gpipe::kernelFamiliesEnd(); ++f) {
    const KernelFamily *at = f;
    size_t steps = 0;
    while (!at->nearest.empty()) {
      const KernelFamily *next = gpipe::findKernelFamily(at->nearest);
      ASSERT_NE(next, nullptr) << at->name << " -> " << at->nearest;
      EXPECT_EQ(next->timing, f->timing) << f->name << " -> " << next->name;
      at = next;
      ASSERT_LT(++steps, count) << "a cycle from " << f->name;
    }
  }
}

TEST(KernelFamily, PropertiesTheCostModelReads) {
  const KernelFamily *conv = gpipe::findKernelFamily("conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->timing, KernelTiming::Flops);
  EXPECT_EQ(conv->planes, KernelPlanes::FeatureMaps);
  EXPECT_TRUE(conv->convertsParameters);
  const KernelFamily *columns = gpipe::findKernelFamily("batch_norm_columns");
  ASSERT_NE(columns, nullptr);
  EXPECT_EQ(columns->planes, KernelPlanes::None);
  EXPECT_EQ(gpipe::findKernelFamily("batched_matmul")->planes,
            KernelPlanes::Matrices);
  EXPECT_EQ(columns->nearest, "batch_norm");
  for (const char *loop : {"elementwise", "copy", "gelu"})
    EXPECT_EQ(gpipe::findKernelFamily(loop)->timing, KernelTiming::Loop)
        << loop;
  EXPECT_EQ(gpipe::findKernelFamily("matmul")->timing, KernelTiming::Flops);
  EXPECT_EQ(gpipe::findKernelFamily("softmax")->timing, KernelTiming::Bytes);
  // Poolings by their windows' taps; the unit a profile's fits name.
  for (const char *pool : {"pooling", "max_pool"})
    EXPECT_EQ(gpipe::findKernelFamily(pool)->timing, KernelTiming::Taps)
        << pool;
  EXPECT_EQ(gpipe::workUnit(KernelTiming::Flops), "flops");
  EXPECT_EQ(gpipe::workUnit(KernelTiming::Taps), "taps");
  EXPECT_EQ(gpipe::workUnit(KernelTiming::Bytes), "bytes");
  EXPECT_EQ(gpipe::workUnit(KernelTiming::Loop), "bytes");
}
