#include "gpipe/runtime/Npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <set>

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

namespace {
void put16(std::string &b, uint16_t v) {
  b += static_cast<char>(v & 0xff);
  b += static_cast<char>(v >> 8);
}
void put32(std::string &b, uint32_t v) {
  put16(b, static_cast<uint16_t>(v & 0xffff));
  put16(b, static_cast<uint16_t>(v >> 16));
}

void put64(std::string &b, uint64_t v) {
  put32(b, static_cast<uint32_t>(v & 0xffffffff));
  put32(b, static_cast<uint32_t>(v >> 32));
}

/// A ZIP archive of stored (uncompressed) members, as numpy.savez writes;
/// `zip64`: as it writes one with members over 2 GiB or past 4 GiB (the
/// sizes, offsets and counts in ZIP64 records, 0xffffffff in the others).
std::string
storedZip(const std::vector<std::pair<std::string, std::string>> &members,
          bool zip64 = false) {
  std::string file, directory;
  for (const auto &[name, bytes] : members) {
    uint32_t local = static_cast<uint32_t>(file.size());
    put32(file, 0x04034b50);
    put16(file, 20), put16(file, 0), put16(file, 0), put16(file, 0);
    put16(file, 0), put32(file, 0);
    put32(file, static_cast<uint32_t>(bytes.size()));
    put32(file, static_cast<uint32_t>(bytes.size()));
    put16(file, static_cast<uint16_t>(name.size())), put16(file, 0);
    file += name + bytes;
    put32(directory, 0x02014b50);
    put16(directory, 45), put16(directory, 45), put16(directory, 0);
    put16(directory, 0), put16(directory, 0), put16(directory, 0);
    put32(directory, 0);
    uint32_t size = zip64 ? 0xffffffff : static_cast<uint32_t>(bytes.size());
    put32(directory, size), put32(directory, size);
    put16(directory, static_cast<uint16_t>(name.size()));
    put16(directory, zip64 ? 4 + 24 : 0), put16(directory, 0);
    put16(directory, 0), put16(directory, 0), put32(directory, 0);
    put32(directory, zip64 ? 0xffffffff : local);
    directory += name;
    if (zip64) {
      put16(directory, 1), put16(directory, 24);
      put64(directory, bytes.size()), put64(directory, bytes.size());
      put64(directory, local);
    }
  }
  uint32_t at = static_cast<uint32_t>(file.size());
  file += directory;
  if (zip64) {
    uint64_t record = file.size();
    put32(file, 0x06064b50), put64(file, 44);
    put16(file, 45), put16(file, 45), put32(file, 0), put32(file, 0);
    put64(file, members.size()), put64(file, members.size());
    put64(file, directory.size()), put64(file, at);
    put32(file, 0x07064b50), put32(file, 0), put64(file, record);
    put32(file, 1);
  }
  put32(file, 0x06054b50);
  put16(file, 0), put16(file, 0);
  uint16_t count = zip64 ? 0xffff : static_cast<uint16_t>(members.size());
  put16(file, count), put16(file, count);
  put32(file, zip64 ? 0xffffffff : static_cast<uint32_t>(directory.size()));
  put32(file, zip64 ? 0xffffffff : at);
  put16(file, 0);
  return file;
}

void writeFile(const std::string &path, const std::string &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}
} // namespace

TEST(Npz, ReadsOnlyTheArraysAskedFor) {
  // 'broken' is no .npy at all: reading everything fails on it, reading
  // 'good' alone never looks at it (a rank reads only its stages' arrays).
  std::string path = ::testing::TempDir() + "/only.npz";
  {
    FILE *f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string zip =
        storedZip({{"good.npy", numpyWritten()}, {"broken.npy", "not numpy"}});
    std::fwrite(zip.data(), 1, zip.size(), f);
    std::fclose(f);
  }
  std::set<std::string> only = {"good", "absent"};
  std::map<std::string, HostTensor> arrays = readNpz(path, &only);
  ASSERT_EQ(arrays.size(), 1u);
  EXPECT_EQ(arrays.at("good").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(npzArrayNames(path), (std::vector<std::string>{"good", "broken"}));
  try {
    readNpz(path);
    FAIL() << "read a member that is not .npy";
  } catch (const NpyError &e) {
    EXPECT_NE(std::string(e.what()).find("only.npz:broken"), std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

TEST(Npz, LocatesStoredArraysInPlainAndZip64Archives) {
  HostTensor t = randomTensor(DType::F32, {5, 3}, 7);
  std::string npy = serializeNpy(t);
  for (bool zip64 : {false, true}) {
    std::string path = ::testing::TempDir() + "/located.npz";
    std::string zip =
        storedZip({{"other.npy", numpyWritten()}, {"x.npy", npy}}, zip64);
    writeFile(path, zip);
    // Read whole, as before.
    std::map<std::string, HostTensor> arrays = readNpz(path);
    ASSERT_EQ(arrays.size(), 2u) << zip64;
    EXPECT_EQ(arrays.at("x").data, t.data) << zip64;
    EXPECT_EQ(npzArrayNames(path), (std::vector<std::string>{"other", "x"}));
    // Located: the array's bytes at the offset given, nothing read.
    std::map<std::string, ArrayInFile> located =
        locateNpzArrays(path, {"x", "absent"});
    ASSERT_EQ(located.size(), 1u) << zip64;
    const ArrayInFile &x = located.at("x");
    EXPECT_EQ(x.path, path);
    EXPECT_EQ(x.dtype, DType::F32);
    EXPECT_EQ(x.shape, (std::vector<int64_t>{5, 3}));
    ASSERT_LE(x.offset + t.data.size(), zip.size());
    EXPECT_EQ(std::memcmp(zip.data() + x.offset, t.data.data(), t.data.size()),
              0)
        << zip64;
    std::remove(path.c_str());
  }
}

TEST(Npz, RefusesAMemberWhoseHeaderDisagreesWithItsSize) {
  // A member cut short (its header says 2 x 3 floats, 8 bytes are gone):
  // located arrays are read a row at a time later, so the sizes must
  // agree now.
  std::string path = ::testing::TempDir() + "/short.npz";
  std::string npy = numpyWritten();
  npy.resize(npy.size() - 8);
  writeFile(path, storedZip({{"x.npy", npy}}));
  try {
    locateNpzArrays(path, {"x"});
    FAIL() << "located a member shorter than its header says";
  } catch (const NpyError &e) {
    EXPECT_NE(std::string(e.what()).find("short.npz"), std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}

TEST(Npz, RefusesAStoredMemberThatRunsPastTheFile) {
  // The directory and the .npy header agree on 1 GiB of floats that the
  // file does not hold: refused when located, not at a later batch.
  std::string header = "{'descr': '<f4', 'fortran_order': False, "
                       "'shape': (268435456,), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string npy("\x93NUMPY\x01\x00", 8);
  npy += static_cast<char>(header.size());
  npy += '\0';
  npy += header;
  std::string zip = storedZip({{"x.npy", npy}});
  // The central directory's sizes (at 20 and 24 in its record) claim the
  // data too.
  size_t record = zip.rfind(std::string("PK\x01\x02", 4));
  ASSERT_NE(record, std::string::npos);
  uint32_t claimed = static_cast<uint32_t>(npy.size()) + (1u << 30);
  for (size_t at : {record + 20, record + 24})
    for (int i = 0; i < 4; ++i)
      zip[at + i] = static_cast<char>((claimed >> (8 * i)) & 0xff);
  std::string path = ::testing::TempDir() + "/past.npz";
  writeFile(path, zip);
  try {
    locateNpzArrays(path, {"x"});
    FAIL() << "located a member that runs past the end of the file";
  } catch (const NpyError &e) {
    EXPECT_NE(std::string(e.what()).find("truncated ZIP member 'x.npy'"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
}
