#include "gpipe/common/CpuFeatures.h"
#include "gpipe/runtime/Bundle.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace gpipe;

namespace {
bool contains(const std::vector<std::string> &v, const std::string &name) {
  return std::find(v.begin(), v.end(), name) != v.end();
}
} // namespace

TEST(CpuFeatures, MissingAreTheKnownRequiredNotAvailable) {
  std::vector<std::string> available = {"sse2", "avx", "avx2", "fma"};
  EXPECT_TRUE(missingCpuFeatures({"avx2", "fma"}, available).empty());
  // In the order required; a name the table does not know is not checked.
  EXPECT_EQ(missingCpuFeatures({"avx512f", "avx2", "no-such-isa", "amx-tile"},
                               available),
            (std::vector<std::string>{"avx512f", "amx-tile"}));
  EXPECT_TRUE(isKnownCpuFeature("sse4.2"));
  EXPECT_TRUE(isKnownCpuFeature("avx512bf16"));
  EXPECT_FALSE(isKnownCpuFeature("fast-gather")); // a tuning flag, not an ISA
}

TEST(CpuFeatures, TheHostHasOnlyKnownFeaturesAndItsLevel) {
  std::vector<std::string> host = hostCpuFeatures();
#if defined(__x86_64__)
  // Every x86-64 CPU has SSE2; a 64-bit OS saves the SSE state.
  EXPECT_TRUE(contains(host, "sse2"));
#endif
  for (const std::string &name : host)
    EXPECT_TRUE(isKnownCpuFeature(name)) << name;
  std::string level = hostMicroarchitectureLevel();
  EXPECT_TRUE(level == "x86-64" || level == "x86-64-v2" ||
              level == "x86-64-v3" || level == "x86-64-v4")
      << level;
  // A level is claimed only with its features (x86-64 psABI).
  if (level == "x86-64-v3" || level == "x86-64-v4")
    EXPECT_TRUE(
        missingCpuFeatures({"avx2", "fma", "bmi2", "movbe"}, host).empty());
  if (level == "x86-64-v4")
    EXPECT_TRUE(
        missingCpuFeatures({"avx512f", "avx512bw", "avx512vl"}, host).empty());
}

TEST(CpuFeatures, ABundleNeedingWhatTheCpuLacksIsRefusedNamingIt) {
  runtime::Bundle bundle;
  bundle.path = "model.gpipe";
  bundle.targetCpu = "sapphirerapids";
  bundle.targetFeatures = {"sse2", "avx512f", "amx-tile", "avx512fp16"};
  std::vector<std::string> available = {"sse2", "avx512f"};
  try {
    runtime::checkTargetFeatures(bundle, available);
    FAIL() << "a bundle needing amx-tile and avx512fp16 was accepted";
  } catch (const runtime::BundleError &e) {
    std::string what = e.what();
    EXPECT_NE(what.find("model.gpipe"), std::string::npos) << what;
    EXPECT_NE(what.find("sapphirerapids"), std::string::npos) << what;
    EXPECT_NE(what.find("lacks: amx-tile, avx512fp16;"), std::string::npos)
        << what;
    EXPECT_NE(what.find("--target-cpu="), std::string::npos) << what;
  }
  // What it has is enough.
  bundle.targetFeatures = {"sse2", "avx512f"};
  EXPECT_NO_THROW(runtime::checkTargetFeatures(bundle, available));
}
