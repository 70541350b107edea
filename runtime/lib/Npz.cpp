// NumPy .npz archives: ZIP files of .npy members, stored or deflated.
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/Npy.h"

#include <zlib.h>

#include <cstring>

namespace gpipe::runtime {

namespace {

[[noreturn]] void fail(const std::string &path, const std::string &reason) {
  throw NpyError(path + ": " + reason);
}

uint32_t le32(const std::string &b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

uint16_t le16(const std::string &b, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(b[at]) |
                               (static_cast<unsigned char>(b[at + 1]) << 8));
}

std::string inflateRaw(const std::string &path, const char *data, size_t size,
                       size_t expected) {
  // Deflate expands at most 1032 times: refuse a header that claims more
  // before allocating what it claims.
  if (expected / 1032 > size)
    fail(path, "corrupt compressed member");
  std::string out(expected, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
    fail(path, "cannot initialize zlib");
  z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data));
  z.avail_in = static_cast<uInt>(size);
  z.next_out = reinterpret_cast<Bytef *>(out.data());
  z.avail_out = static_cast<uInt>(expected);
  int rc = inflate(&z, Z_FINISH);
  inflateEnd(&z);
  if (rc != Z_STREAM_END || z.total_out != expected)
    fail(path, "corrupt compressed member");
  return out;
}

} // namespace

std::map<std::string, HostTensor> readNpz(const std::string &path) {
  std::optional<std::string> file = readFileBytes(path);
  if (!file)
    fail(path, "cannot open the file");
  const std::string &b = *file;
  // The end-of-central-directory record: the last 22+ bytes.
  if (b.size() < 22)
    fail(path, "not a .npz (ZIP) file");
  size_t eocd = std::string::npos;
  for (size_t i = b.size() - 22 + 1; i-- > 0 && b.size() - i <= 22 + 65535;)
    if (le32(b, i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos)
    fail(path, "not a .npz (ZIP) file");
  uint16_t entries = le16(b, eocd + 10);
  size_t at = le32(b, eocd + 16);
  std::map<std::string, HostTensor> arrays;
  for (uint16_t e = 0; e < entries; ++e) {
    if (at + 46 > b.size() || le32(b, at) != 0x02014b50)
      fail(path, "corrupt ZIP central directory");
    uint16_t method = le16(b, at + 10);
    uint32_t compressed = le32(b, at + 20), size = le32(b, at + 24);
    uint16_t nameLen = le16(b, at + 28), extraLen = le16(b, at + 30),
             commentLen = le16(b, at + 32);
    uint32_t local = le32(b, at + 42);
    if (at + 46 + nameLen > b.size())
      fail(path, "corrupt ZIP central directory");
    std::string name = b.substr(at + 46, nameLen);
    at += 46 + nameLen + extraLen + commentLen;
    if (compressed == 0xffffffff || size == 0xffffffff || local == 0xffffffff)
      fail(path, "ZIP64 archives (members over 4 GiB) are not supported");
    if (static_cast<size_t>(local) + 30 > b.size() ||
        le32(b, local) != 0x04034b50)
      fail(path, "corrupt ZIP member '" + name + "'");
    size_t data = local + 30 + le16(b, local + 26) + le16(b, local + 28);
    if (data + compressed > b.size())
      fail(path, "truncated ZIP member '" + name + "'");
    std::string bytes;
    if (method == 0)
      bytes = b.substr(data, compressed);
    else if (method == 8)
      bytes = inflateRaw(path, b.data() + data, compressed, size);
    else
      fail(path, "member '" + name + "' uses unsupported compression " +
                     std::to_string(method));
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    arrays[name] = parseNpy(bytes, path + ":" + name);
  }
  return arrays;
}

} // namespace gpipe::runtime
