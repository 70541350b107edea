// What ranks send each other besides stage messages (parameters, trace
// tracks, op times for a gather): values and length-prefixed strings
// appended to a byte string, read back in the same order.
#ifndef GPIPE_RUNTIME_BYTESTREAM_H
#define GPIPE_RUNTIME_BYTESTREAM_H

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace gpipe::runtime {

class ByteWriter {
public:
  template <typename T> void put(const T &value) {
    static_assert(std::is_trivially_copyable_v<T>);
    putBytes(&value, sizeof value);
  }
  void putBytes(const void *data, size_t n) {
    bytes.append(static_cast<const char *>(data), n);
  }
  /// Its length, then its bytes.
  void putString(const std::string &text) {
    put<uint64_t>(text.size());
    putBytes(text.data(), text.size());
  }
  std::string &str() { return bytes; }

private:
  std::string bytes;
};

class ByteReader {
public:
  /// Reads `in`; a read past its end throws std::runtime_error saying
  /// `what` was truncated.
  ByteReader(const std::string &in, std::string what)
      : in(in), what(std::move(what)) {}
  bool done() const { return at == in.size(); }
  template <typename T> T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    getBytes(&value, sizeof value);
    return value;
  }
  void getBytes(void *data, size_t n) {
    if (n > in.size() - at)
      throw std::runtime_error(what + " arrived truncated");
    std::memcpy(data, in.data() + at, n);
    at += n;
  }
  std::string getString() {
    uint64_t n = get<uint64_t>();
    if (n > in.size() - at)
      throw std::runtime_error(what + " arrived truncated");
    std::string text(in.data() + at, n);
    at += n;
    return text;
  }

private:
  const std::string &in;
  std::string what;
  size_t at = 0;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_BYTESTREAM_H
