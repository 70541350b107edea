#include "gpipe/runtime/TextData.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

using namespace gpipe::runtime;

namespace {
std::string writeScratch(const char *name, const std::string &bytes) {
  auto path = std::filesystem::temp_directory_path() /
              ("gpipe-textdata-" + std::string(name) + "-" +
               std::to_string(std::random_device{}()));
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

const int64_t *ints(const HostTensor &t) {
  return reinterpret_cast<const int64_t *>(t.data.data());
}
} // namespace

TEST(TextData, CutsRandomBytesIntoSequencesLabelledWithTheNextByte) {
  std::mt19937 rng(7);
  std::string bytes(1000, '\0');
  for (char &c : bytes)
    c = static_cast<char>(rng());
  std::string path = writeScratch("random", bytes);
  TokenDataset ds = readByteSequences(path, 64);
  // (1000 - 1) / 64 = 15 whole sequences with their next byte.
  ASSERT_EQ(ds.tokens.shape, (std::vector<int64_t>{15, 64}));
  ASSERT_EQ(ds.labels.shape, (std::vector<int64_t>{15, 64}));
  EXPECT_EQ(ds.tokens.dtype, DType::I64);
  for (int64_t i = 0; i < 15 * 64; ++i) {
    ASSERT_EQ(ints(ds.tokens)[i], static_cast<unsigned char>(bytes[i]));
    ASSERT_EQ(ints(ds.labels)[i], static_cast<unsigned char>(bytes[i + 1]));
  }
  EXPECT_FALSE(isZipFile(path));
  std::filesystem::remove(path);
}

TEST(TextData, TooShortTextNamesTheFile) {
  std::string path = writeScratch("short", "sixteen bytes!!!");
  try {
    readByteSequences(path, 16);
    FAIL() << "expected an error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("16 bytes"), std::string::npos);
  }
  std::filesystem::remove(path);
  EXPECT_THROW(readByteSequences("/nonexistent/gpipe/text.txt", 8),
               std::runtime_error);
}

TEST(TextData, RecognizesZipArchives) {
  std::string path = writeScratch("zip", std::string("PK\x03\x04rest", 8));
  EXPECT_TRUE(isZipFile(path));
  std::filesystem::remove(path);
}
