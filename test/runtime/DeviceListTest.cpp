#include "gpipe/runtime/DeviceList.h"

#include <gtest/gtest.h>

using namespace gpipe::runtime;

TEST(DeviceList, ParsesCoresRangesAndGpus) {
  std::vector<Device> devices = parseDevices("cpu:0,cpu:2-4,cuda:1,cpu:0");
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_EQ(devices[0].kind, DeviceKind::Cpu);
  EXPECT_EQ(devices[0].ids, std::vector<int>{0});
  EXPECT_EQ(devices[1].ids, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(devices[2].kind, DeviceKind::Cuda);
  EXPECT_EQ(devices[2].ids, std::vector<int>{1});
  // A device may host several stages.
  EXPECT_EQ(devices[3], devices[0]);
}

TEST(DeviceList, PrintsCanonicalNames) {
  for (const char *text : {"cpu:0", "cpu:2-5", "cuda:3"})
    EXPECT_EQ(parseDevices(text).front().str(), text);
}

TEST(DeviceList, RejectsMalformedItems) {
  for (const char *text :
       {"", "cpu", "cpu:", "cpu:-1", "cpu:3-1", "cpu:a", "gpu:0", "cuda:0-1",
        "cpu:0,", ",cpu:0", "cpu:0,,cpu:1", "cpu:1x", "cpu:99999999999"}) {
    EXPECT_THROW(parseDevices(text), DeviceListError) << text;
  }
}

TEST(DeviceList, ErrorNamesTheItem) {
  try {
    parseDevices("cpu:0,tpu:1");
    FAIL() << "no error";
  } catch (const DeviceListError &e) {
    EXPECT_NE(std::string(e.what()).find("'tpu:1'"), std::string::npos)
        << e.what();
  }
}
