// Protobuf wire-format reading, shared by the TensorProto reader and the
// ONNX writer (the runtime does not link a protobuf library).
#ifndef GPIPE_RUNTIME_LIB_PROTOWIRE_H
#define GPIPE_RUNTIME_LIB_PROTOWIRE_H

#include "gpipe/runtime/TensorProto.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gpipe::runtime {

/// A cursor over protobuf wire-format bytes.
class Reader {
public:
  Reader(std::string_view bytes, const std::string &name)
      : bytes(bytes), name(name) {}
  bool done() const { return pos >= bytes.size(); }
  /// The bytes between two positions (e.g. one whole field, verbatim).
  size_t position() const { return pos; }
  std::string_view slice(size_t from, size_t to) const {
    return bytes.substr(from, to - from);
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= bytes.size())
        throw TensorProtoError(name + ": truncated protobuf message");
      uint8_t b = static_cast<uint8_t>(bytes[pos++]);
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return value;
    }
    throw TensorProtoError(name + ": malformed protobuf varint");
  }
  std::string_view take(uint64_t n) {
    if (n > bytes.size() - pos)
      throw TensorProtoError(name + ": truncated protobuf message");
    std::string_view s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
  template <typename T> T fixed() {
    std::string_view s = take(sizeof(T));
    T v;
    std::memcpy(&v, s.data(), sizeof(T));
    return v;
  }
  void skip(unsigned wireType) {
    switch (wireType) {
    case 0:
      varint();
      break;
    case 1:
      take(8);
      break;
    case 2:
      take(varint());
      break;
    case 5:
      take(4);
      break;
    default:
      throw TensorProtoError(name + ": unsupported protobuf wire type " +
                             std::to_string(wireType));
    }
  }

private:
  std::string_view bytes;
  size_t pos = 0;
  const std::string &name;
};

/// Appends a varint / a field key / a length-delimited field.
inline void putVarint(std::string &out, uint64_t v) {
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out += static_cast<char>(b | (v ? 0x80 : 0));
  } while (v);
}
inline void putBytesField(std::string &out, unsigned field,
                          std::string_view bytes) {
  putVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  putVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_LIB_PROTOWIRE_H
