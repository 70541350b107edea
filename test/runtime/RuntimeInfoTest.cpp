#include "gpipe/runtime/RuntimeInfo.h"

#include <gtest/gtest.h>

using namespace gpipe::runtime;

TEST(RuntimeInfo, ReportsOneDnn) {
  std::string version = onednnVersion();
  EXPECT_FALSE(version.empty());
  EXPECT_NE(runtimeInfo(false).find("oneDNN " + version), std::string::npos);
  EXPECT_NE(runtimeInfo(true).find("oneDNN " + version), std::string::npos);
}

TEST(RuntimeInfo, CudaDevicesOrReason) {
  std::string reason;
  int count = cudaDeviceCount(&reason);
  if (count == 0)
    GTEST_SKIP() << "no CUDA device: " << reason;
  EXPECT_GT(count, 0);
}
