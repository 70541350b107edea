#include "gpipe/runtime/TensorProto.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/OnnxExport.h"

#include "onnx/onnx_pb.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {
std::string serialized(const google::protobuf::MessageLite &m) {
  std::string out;
  m.SerializeToString(&out);
  return out;
}

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}
} // namespace

TEST(TensorProto, ReadsRawData) {
  std::vector<float> values = randomFloats(6, 1);
  onnx::TensorProto p;
  p.add_dims(2);
  p.add_dims(3);
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.set_name("x");
  p.set_raw_data(values.data(), values.size() * sizeof(float));
  HostTensor t = parseTensorProto(serialized(p), "t.pb");
  EXPECT_EQ(t.dtype, DType::F32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t.data.size(), values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(t.data.data(), values.data(), t.data.size()), 0);
}

TEST(TensorProto, ReadsTypedFields) {
  onnx::TensorProto p;
  p.add_dims(3);
  p.set_data_type(onnx::TensorProto::INT64);
  for (int64_t v : {int64_t(5), int64_t(-1), int64_t(1) << 40})
    p.add_int64_data(v);
  HostTensor t = parseTensorProto(serialized(p), "t.pb");
  ASSERT_EQ(t.dtype, DType::I64);
  const int64_t *v = reinterpret_cast<const int64_t *>(t.data.data());
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[1], -1);
  EXPECT_EQ(v[2], 1LL << 40);

  // Narrow integers travel in int32_data, unsigned 32/64 in uint64_data.
  onnx::TensorProto q;
  q.add_dims(2);
  q.set_data_type(onnx::TensorProto::INT8);
  q.add_int32_data(-7);
  q.add_int32_data(100);
  HostTensor i8 = parseTensorProto(serialized(q), "q.pb");
  ASSERT_EQ(i8.dtype, DType::I8);
  EXPECT_EQ(static_cast<int8_t>(i8.data[0]), -7);
  EXPECT_EQ(static_cast<int8_t>(i8.data[1]), 100);
  onnx::TensorProto u;
  u.set_data_type(onnx::TensorProto::UINT32); // a scalar
  u.add_uint64_data(4000000000u);
  HostTensor u32 = parseTensorProto(serialized(u), "u.pb");
  ASSERT_EQ(u32.dtype, DType::U32);
  EXPECT_TRUE(u32.shape.empty());
  uint32_t uv;
  std::memcpy(&uv, u32.data.data(), sizeof(uv));
  EXPECT_EQ(uv, 4000000000u);
}

TEST(TensorProto, RejectsBadInput) {
  onnx::TensorProto p;
  p.add_dims(4);
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.set_raw_data(std::string(8, '\0')); // 2 floats for 4 elements
  std::string bytes = serialized(p);
  try {
    parseTensorProto(bytes, "short.pb");
    FAIL() << "a short raw_data was accepted";
  } catch (const TensorProtoError &e) {
    EXPECT_STREQ(e.what(), "short.pb: raw_data holds 8 bytes, float32[4] "
                           "needs 16");
  }
  EXPECT_THROW(parseTensorProto(bytes.substr(0, bytes.size() - 3), "cut.pb"),
               TensorProtoError);
  onnx::TensorProto typed;
  typed.add_dims(2);
  typed.set_data_type(onnx::TensorProto::INT64);
  typed.add_int32_data(1); // the wrong field for int64
  typed.add_int32_data(2);
  EXPECT_THROW(parseTensorProto(serialized(typed), "typed.pb"),
               TensorProtoError);
  onnx::TensorProto strings;
  strings.set_data_type(onnx::TensorProto::STRING);
  EXPECT_THROW(parseTensorProto(serialized(strings), "s.pb"), TensorProtoError);
  onnx::TensorProto external;
  external.set_data_type(onnx::TensorProto::FLOAT);
  external.set_data_location(onnx::TensorProto::EXTERNAL);
  EXPECT_THROW(parseTensorProto(serialized(external), "e.pb"),
               TensorProtoError);
  onnx::TensorProto negative;
  negative.add_dims(-1);
  negative.set_data_type(onnx::TensorProto::FLOAT);
  EXPECT_THROW(parseTensorProto(serialized(negative), "n.pb"),
               TensorProtoError);
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

TEST(OnnxExport, ReplacesInitializersAndKeepsTheRest) {
  std::vector<float> before = randomFloats(6, 2), after = randomFloats(6, 3);
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("test");
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("g");
  onnx::NodeProto *node = graph->add_node();
  node->set_op_type("MatMul");
  node->add_input("x");
  node->add_input("w");
  node->add_output("y");
  onnx::TensorProto *w = graph->add_initializer();
  w->set_name("w");
  w->add_dims(2);
  w->add_dims(3);
  w->set_data_type(onnx::TensorProto::FLOAT);
  for (float v : before)
    w->add_float_data(v); // typed field in, raw_data out
  onnx::TensorProto *shape = graph->add_initializer();
  shape->set_name("shape");
  shape->add_dims(1);
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_int64_data(6);
  std::string dir = testing::TempDir();
  std::string in = dir + "/export_in.onnx", out = dir + "/export_out.onnx";
  writeFileAtomically(in, serialized(model));

  HostTensor trained;
  trained.dtype = DType::F32;
  trained.shape = {2, 3};
  trained.data.resize(after.size() * sizeof(float));
  std::memcpy(trained.data.data(), after.data(), trained.data.size());
  EXPECT_EQ(writeOnnxWithParameters(in, {{"w", trained}}, out), 1u);

  onnx::ModelProto back;
  ASSERT_TRUE(back.ParseFromString(*readFileBytes(out)));
  ASSERT_EQ(back.graph().initializer_size(), 2);
  const onnx::TensorProto &w2 = back.graph().initializer(0);
  EXPECT_EQ(w2.name(), "w");
  EXPECT_EQ(w2.float_data_size(), 0);
  ASSERT_EQ(w2.raw_data().size(), trained.data.size());
  EXPECT_EQ(std::memcmp(w2.raw_data().data(), after.data(), 24), 0);
  EXPECT_EQ(back.graph().initializer(1).int64_data(0), 6);
  EXPECT_EQ(back.graph().node(0).op_type(), "MatMul");
  EXPECT_EQ(back.producer_name(), "test");

  // A parameter the model lacks, or of another size or type, writes nothing.
  std::remove(out.c_str());
  EXPECT_THROW(writeOnnxWithParameters(in, {{"v", trained}}, out),
               std::runtime_error);
  trained.shape = {6};
  trained.dtype = DType::I32;
  EXPECT_THROW(writeOnnxWithParameters(in, {{"w", trained}}, out),
               std::runtime_error);
  trained.data.resize(4);
  trained.shape = {1};
  trained.dtype = DType::F32;
  EXPECT_THROW(writeOnnxWithParameters(in, {{"w", trained}}, out),
               std::runtime_error);
  EXPECT_FALSE(readFileBytes(out).has_value());
}
