#include "gpipe/runtime/TensorProto.h"
#include "ProtoWire.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/Npy.h"

#include <cstring>

namespace gpipe::runtime {

namespace {

[[noreturn]] void fail(const std::string &name, const std::string &reason) {
  throw TensorProtoError(name + ": " + reason);
}

/// Reads a repeated scalar field, packed (wire type 2) or not.
template <typename F>
void repeated(Reader &r, unsigned wireType, const std::string &name, F read) {
  if (wireType == 2) {
    Reader inner(r.take(r.varint()), name);
    while (!inner.done())
      read(inner);
  } else {
    read(r);
  }
}

bool dtypeOf(int onnxType, DType &dtype) {
  switch (onnxType) {
  case 1:
    dtype = DType::F32;
    return true;
  case 2:
    dtype = DType::U8;
    return true;
  case 3:
    dtype = DType::I8;
    return true;
  case 4:
    dtype = DType::U16;
    return true;
  case 5:
    dtype = DType::I16;
    return true;
  case 6:
    dtype = DType::I32;
    return true;
  case 7:
    dtype = DType::I64;
    return true;
  case 9:
    dtype = DType::Bool;
    return true;
  case 10:
    dtype = DType::F16;
    return true;
  case 11:
    dtype = DType::F64;
    return true;
  case 12:
    dtype = DType::U32;
    return true;
  case 13:
    dtype = DType::U64;
    return true;
  case 16:
    dtype = DType::BF16;
    return true;
  default:
    return false;
  }
}

template <typename T> void put(std::vector<std::byte> &out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

} // namespace

HostTensor parseTensorProto(std::string_view bytes, const std::string &name) {
  Reader r(bytes, name);
  HostTensor t;
  int onnxType = 0;
  std::string_view raw;
  bool hasRaw = false;
  std::vector<float> floats;
  std::vector<double> doubles;
  std::vector<int64_t> ints; // int32_data, int64_data and uint64_data
  while (!r.done()) {
    uint64_t key = r.varint();
    unsigned field = static_cast<unsigned>(key >> 3), wire = key & 7;
    switch (field) {
    case 1:
      repeated(r, wire, name, [&](Reader &x) {
        t.shape.push_back(static_cast<int64_t>(x.varint()));
      });
      break;
    case 2:
      onnxType = static_cast<int>(r.varint());
      break;
    case 4:
      repeated(r, wire, name,
               [&](Reader &x) { floats.push_back(x.fixed<float>()); });
      break;
    case 5:
    case 7:
    case 11:
      repeated(r, wire, name, [&](Reader &x) {
        ints.push_back(static_cast<int64_t>(x.varint()));
      });
      break;
    case 6:
      fail(name, "string tensors are not supported");
    case 9:
      raw = r.take(r.varint());
      hasRaw = true;
      break;
    case 10:
      repeated(r, wire, name,
               [&](Reader &x) { doubles.push_back(x.fixed<double>()); });
      break;
    case 13:
      fail(name, "tensors with external data are not supported");
    default:
      r.skip(wire);
    }
  }
  if (!dtypeOf(onnxType, t.dtype))
    fail(name, "unsupported TensorProto data type " + std::to_string(onnxType));
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || (d > 0 && n > (int64_t(1) << 40) / d))
      fail(name, "invalid TensorProto dims");
    n *= d;
  }
  size_t width = dtypeSize(t.dtype);
  // Check the data against the dims before allocating anything.
  if (hasRaw) {
    if (raw.size() != static_cast<size_t>(n) * width)
      fail(name, "raw_data holds " + std::to_string(raw.size()) + " bytes, " +
                     t.describe() + " needs " +
                     std::to_string(static_cast<size_t>(n) * width));
    // assign, not memcpy: empty raw_data may have a null data().
    const auto *data = reinterpret_cast<const std::byte *>(raw.data());
    t.data.assign(data, data + raw.size());
    return t;
  }
  size_t have = t.dtype == DType::F32   ? floats.size()
                : t.dtype == DType::F64 ? doubles.size()
                                        : ints.size();
  if (have != static_cast<size_t>(n))
    fail(name, "holds " + std::to_string(have) + " values, " + t.describe() +
                   " needs " + std::to_string(n));
  t.data.resize(static_cast<size_t>(n) * width);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
    case DType::F32:
      put(t.data, i, floats[i]);
      break;
    case DType::F64:
      put(t.data, i, doubles[i]);
      break;
    case DType::F16:
    case DType::BF16:
    case DType::U16:
      put(t.data, i, static_cast<uint16_t>(ints[i]));
      break;
    case DType::I16:
      put(t.data, i, static_cast<int16_t>(ints[i]));
      break;
    case DType::I8:
      put(t.data, i, static_cast<int8_t>(ints[i]));
      break;
    case DType::U8:
    case DType::Bool:
      put(t.data, i, static_cast<uint8_t>(ints[i]));
      break;
    case DType::I32:
      put(t.data, i, static_cast<int32_t>(ints[i]));
      break;
    case DType::U32:
      put(t.data, i, static_cast<uint32_t>(ints[i]));
      break;
    case DType::I64:
    case DType::U64:
      put(t.data, i, ints[i]);
      break;
    }
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
