#include "gpipe/runtime/FileIO.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

using namespace gpipe::runtime;

namespace {
std::filesystem::path scratchDir(const char *name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("gpipe-fileio-" + std::string(name) + "-" +
              std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  return dir;
}
} // namespace

TEST(FileIO, WriteThenReadRoundTripsRandomBytes) {
  auto dir = scratchDir("roundtrip");
  std::string path = (dir / "blob.bin").string();
  std::mt19937 rng(3);
  std::string bytes(4099, '\0');
  for (char &c : bytes)
    c = static_cast<char>(rng());
  writeFileAtomically(path, bytes);
  std::optional<std::string> back = readFileBytes(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, bytes);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(FileIO, ReadOfMissingFileIsNullopt) {
  EXPECT_FALSE(readFileBytes("/nonexistent/gpipe/file.bin").has_value());
}

TEST(FileIO, FailedWriteNamesFileAndKeepsOldContents) {
  auto dir = scratchDir("keep");
  std::string path = (dir / "out.bin").string();
  writeFileAtomically(path, "old contents");
  // A directory where the temporary file should go makes the write fail.
  std::filesystem::create_directory(path + ".tmp");
  try {
    writeFileAtomically(path, "new contents");
    FAIL() << "expected FileWriteError";
  } catch (const FileWriteError &e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  EXPECT_EQ(readFileBytes(path).value(), "old contents");
  std::filesystem::remove_all(dir);
}
