#include "gpipe/runtime/TensorProto.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/Npy.h"

#include "onnx/onnx_pb.h"

#include <climits>
#include <cstring>

namespace gpipe::runtime {

namespace {

[[noreturn]] void fail(const std::string &name, const std::string &reason) {
  throw TensorProtoError(name + ": " + reason);
}

/// Copies `values` into `out` as elements of type T.
template <typename T, typename Values>
void store(std::vector<std::byte> &out, const Values &values) {
  out.resize(values.size() * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    T v = static_cast<T>(values.Get(i));
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
}

} // namespace

HostTensor parseTensorProto(std::string_view bytes, const std::string &name) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    fail(name, "a TensorProto larger than 2 GiB needs external data, which "
               "is not supported");
  onnx::TensorProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    fail(name, "not a serialized ONNX TensorProto");
  if (proto.data_type() == onnx::TensorProto::STRING)
    fail(name, "string tensors are not supported");
  if (proto.data_location() == onnx::TensorProto::EXTERNAL ||
      proto.external_data_size())
    fail(name, "tensors with external data are not supported");
  std::optional<DType> dtype = dtypeFromOnnxType(proto.data_type());
  if (!dtype)
    fail(name, "unsupported TensorProto data type " +
                   std::to_string(proto.data_type()));
  HostTensor t;
  t.dtype = *dtype;
  int64_t n = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0 || d > (int64_t(1) << 40) ||
        (d > 0 && n > (int64_t(1) << 40) / d))
      fail(name, "invalid TensorProto dims");
    n *= d;
    t.shape.push_back(d);
  }
  size_t width = dtypeSize(t.dtype);
  if (proto.has_raw_data()) {
    const std::string &raw = proto.raw_data();
    if (raw.size() != static_cast<size_t>(n) * width)
      fail(name, "raw_data holds " + std::to_string(raw.size()) + " bytes, " +
                     t.describe() + " needs " +
                     std::to_string(static_cast<size_t>(n) * width));
    // assign, not memcpy: empty raw_data may have a null data().
    const auto *data = reinterpret_cast<const std::byte *>(raw.data());
    t.data.assign(data, data + raw.size());
    return t;
  }
  // The typed field onnx.proto assigns to each data type, checked against
  // the dims and stored as elements of type T.
  auto take = [&](auto element, const auto &values) {
    using T = decltype(element);
    if (values.size() != n)
      fail(name, "holds " + std::to_string(values.size()) + " values, " +
                     t.describe() + " needs " + std::to_string(n));
    store<T>(t.data, values);
  };
  switch (t.dtype) {
  case DType::F32:
    take(float(), proto.float_data());
    break;
  case DType::F64:
    take(double(), proto.double_data());
    break;
  case DType::I64:
    take(int64_t(), proto.int64_data());
    break;
  case DType::U32:
    take(uint32_t(), proto.uint64_data());
    break;
  case DType::U64:
    take(uint64_t(), proto.uint64_data());
    break;
  case DType::F16:
  case DType::BF16: // the 16 bits of each value
  case DType::U16:
    take(uint16_t(), proto.int32_data());
    break;
  case DType::I16:
    take(int16_t(), proto.int32_data());
    break;
  case DType::I8:
    take(int8_t(), proto.int32_data());
    break;
  case DType::U8:
  case DType::Bool:
    take(uint8_t(), proto.int32_data());
    break;
  case DType::I32:
    take(int32_t(), proto.int32_data());
    break;
  }
  return t;
}

HostTensor readTensorProto(const std::string &path) {
  std::optional<std::string> bytes = readFileBytes(path);
  if (!bytes)
    throw TensorProtoError(path + ": cannot open the file");
  return parseTensorProto(*bytes, path);
}

HostTensor readTensorFile(const std::string &path) {
  auto endsWith = [&](const char *suffix) {
    size_t n = std::strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  if (endsWith(".pb"))
    return readTensorProto(path);
  if (endsWith(".npy"))
    return readNpy(path);
  throw std::runtime_error(path + ": unknown tensor file type (expected .npy "
                                  "or .pb)");
}

} // namespace gpipe::runtime
