#include "gpipe/runtime/TensorProto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {
void varint(std::string &out, uint64_t v) {
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out += static_cast<char>(b | (v ? 0x80 : 0));
  } while (v);
}
void key(std::string &out, unsigned field, unsigned wire) {
  varint(out, (field << 3) | wire);
}
} // namespace

TEST(TensorProto, ReadsRawData) {
  std::string p;
  key(p, 1, 0);
  varint(p, 2);
  key(p, 1, 0);
  varint(p, 3);
  key(p, 2, 0);
  varint(p, 1); // FLOAT
  float values[6] = {1, -2, 3.5f, 0, 7, -8};
  key(p, 9, 2);
  varint(p, sizeof(values));
  p.append(reinterpret_cast<const char *>(values), sizeof(values));
  key(p, 8, 2); // name, skipped
  varint(p, 1);
  p += 'x';
  HostTensor t = parseTensorProto(p, "t.pb");
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t.data.size(), sizeof(values));
  EXPECT_EQ(std::memcmp(t.data.data(), values, sizeof(values)), 0);
}

TEST(TensorProto, ReadsPackedTypedFields) {
  std::string p, packed;
  key(p, 1, 2); // packed dims
  std::string dims;
  varint(dims, 3);
  varint(p, dims.size());
  p += dims;
  key(p, 2, 0);
  varint(p, 7); // INT64
  for (int64_t v : {int64_t(5), int64_t(-1), int64_t(1) << 40})
    varint(packed, static_cast<uint64_t>(v));
  key(p, 7, 2);
  varint(p, packed.size());
  p += packed;
  HostTensor t = parseTensorProto(p, "t.pb");
  ASSERT_EQ(t.dtype, DType::I64);
  const int64_t *v = reinterpret_cast<const int64_t *>(t.data.data());
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[1], -1);
  EXPECT_EQ(v[2], 1LL << 40);
}

TEST(TensorProto, RejectsBadInput) {
  std::string p;
  key(p, 1, 0);
  varint(p, 4);
  key(p, 2, 0);
  varint(p, 1);
  key(p, 9, 2);
  varint(p, 8); // 2 floats for 4 elements
  p.append(8, '\0');
  EXPECT_THROW(parseTensorProto(p, "short.pb"), TensorProtoError);
  EXPECT_THROW(parseTensorProto(p.substr(0, p.size() - 3), "cut.pb"),
               TensorProtoError);
  std::string strings;
  key(strings, 2, 0);
  varint(strings, 8); // STRING
  EXPECT_THROW(parseTensorProto(strings, "s.pb"), TensorProtoError);
  EXPECT_THROW(readTensorProto("/nonexistent.pb"), TensorProtoError);
}

TEST(TensorProto, RandomBytesNeverCrash) {
  std::mt19937 rng(11);
  for (int i = 0; i < 1000; ++i) {
    std::string bytes(rng() % 200, '\0');
    for (char &c : bytes)
      c = static_cast<char>(rng());
    try {
      parseTensorProto(bytes, "random.pb");
    } catch (const TensorProtoError &) {
    }
  }
}
