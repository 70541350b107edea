#include "gpipe/runtime/Npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {
HostTensor randomTensor(DType dtype, std::vector<int64_t> shape,
                        unsigned seed) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(t.numElements() * dtypeSize(dtype));
  std::mt19937 rng(seed);
  for (auto &b : t.data)
    b = static_cast<std::byte>(rng() & 0xff);
  return t;
}

/// A .npy file as NumPy 1.24 writes np.arange(6, dtype=np.float32)
/// .reshape(2, 3).
std::string numpyWritten() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size());
  bytes += '\0';
  bytes += header;
  for (int i = 0; i < 6; ++i) {
    float f = static_cast<float>(i);
    bytes.append(reinterpret_cast<char *>(&f), 4);
  }
  return bytes;
}
} // namespace

TEST(Npy, ReadsNumPyFiles) {
  HostTensor t = parseNpy(numpyWritten(), "a.npy");
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  float values[6];
  std::memcpy(values, t.data.data(), sizeof(values));
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(values[i], static_cast<float>(i));
}

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  unsigned seed = 1;
  for (DType dtype : {DType::F16, DType::F32, DType::F64, DType::I8, DType::I16,
                      DType::I32, DType::I64, DType::U8, DType::U16, DType::U32,
                      DType::U64, DType::Bool}) {
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{}, {7}, {3, 5}, {2, 3, 4}, {4, 0, 2}}) {
      HostTensor t = randomTensor(dtype, shape, seed++);
      HostTensor back = parseNpy(serializeNpy(t), "x.npy");
      EXPECT_EQ(back.dtype, t.dtype) << t.describe();
      EXPECT_EQ(back.shape, t.shape) << t.describe();
      EXPECT_EQ(back.data, t.data) << t.describe();
    }
  }
}

TEST(Npy, DataIsAlignedTo64Bytes) {
  std::string bytes = serializeNpy(randomTensor(DType::F32, {3, 3}, 7));
  EXPECT_EQ((bytes.size() - 36) % 64, 0u);
}

TEST(Npy, WritesAtomicallyAndReadsBack) {
  std::string path = ::testing::TempDir() + "/gpipe_npy_test.npy";
  HostTensor t = randomTensor(DType::I64, {4, 2}, 42);
  writeNpy(path, t);
  HostTensor back = readNpy(path);
  EXPECT_EQ(back.data, t.data);
  std::FILE *tmp = std::fopen((path + ".tmp").c_str(), "rb");
  EXPECT_EQ(tmp, nullptr) << "temporary file left behind";
  if (tmp)
    std::fclose(tmp);
  std::remove(path.c_str());
}

TEST(Npy, RejectsBadFilesWithTheirName) {
  std::string good = numpyWritten();
  struct Case {
    std::string bytes, message;
  } cases[] = {
      {"", "bad magic"},
      {"not numpy at all", "bad magic"},
      {good.substr(0, 40), "truncated .npy header"},
      {good.substr(0, good.size() - 1), "needs 24"},
      {good + "x", "needs 24"},
  };
  for (const Case &c : cases) {
    try {
      parseNpy(c.bytes, "bad.npy");
      FAIL() << "accepted: " << c.message;
    } catch (const NpyError &e) {
      std::string what = e.what();
      EXPECT_EQ(what.rfind("bad.npy: ", 0), 0u) << what;
      EXPECT_NE(what.find(c.message), std::string::npos) << what;
    }
  }
  std::string bigEndian = good;
  bigEndian.replace(bigEndian.find("<f4"), 3, ">f4");
  EXPECT_THROW(parseNpy(bigEndian, "b.npy"), NpyError);
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_THROW(parseNpy(fortran, "f.npy"), NpyError);
  EXPECT_THROW(readNpy("/nonexistent/x.npy"), NpyError);
}

TEST(Npy, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string bytes(rng() % 300, '\0');
    for (char &c : bytes)
      c = static_cast<char>(rng());
    if (i % 2)
      bytes.replace(0, std::min<size_t>(bytes.size(), 8),
                    std::string("\x93NUMPY\x01\x00", 8));
    try {
      parseNpy(bytes, "random.npy");
    } catch (const NpyError &) {
    }
  }
}
