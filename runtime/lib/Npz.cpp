// NumPy .npz archives: ZIP files of .npy members, stored or deflated.
#include "gpipe/runtime/Npy.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <fstream>

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

/// The parts of an archive the reader asks for, read with seeks: the
/// archive is not held in memory whole.
class ArchiveFile {
public:
  explicit ArchiveFile(const std::string &path)
      : path(path), in(path, std::ios::binary) {
    if (!in)
      fail(path, "cannot open the file");
    in.seekg(0, std::ios::end);
    size_ = static_cast<size_t>(in.tellg());
  }
  size_t size() const { return size_; }
  /// `n` bytes at `at`; fails naming `what` when the file is shorter.
  std::string read(size_t at, size_t n, const std::string &what) {
    if (at > size_ || n > size_ - at)
      fail(path, what);
    std::string bytes(n, '\0');
    in.seekg(static_cast<std::streamoff>(at));
    if (!in.read(bytes.data(), static_cast<std::streamsize>(n)))
      fail(path, "cannot read " + what);
    return bytes;
  }

private:
  std::string path;
  std::ifstream in;
  size_t size_ = 0;
};

/// The arrays of `path` that `only` names (all when null); the names of
/// all its arrays into `names` when not null.
std::map<std::string, HostTensor> readMembers(const std::string &path,
                                              const std::set<std::string> *only,
                                              std::vector<std::string> *names) {
  ArchiveFile file(path);
  // The end-of-central-directory record: in the last 22 + 65535 bytes.
  if (file.size() < 22)
    fail(path, "not a .npz (ZIP) file");
  size_t tailAt = file.size() - std::min<size_t>(file.size(), 22 + 65535);
  std::string tail = file.read(tailAt, file.size() - tailAt, "its end");
  size_t eocd = std::string::npos;
  for (size_t i = tail.size() - 22 + 1; i-- > 0;)
    if (le32(tail, i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos)
    fail(path, "not a .npz (ZIP) file");
  uint16_t entries = le16(tail, eocd + 10);
  std::string dir = file.read(le32(tail, eocd + 16), le32(tail, eocd + 12),
                              "corrupt ZIP central directory");
  std::map<std::string, HostTensor> arrays;
  size_t at = 0;
  for (uint16_t e = 0; e < entries; ++e) {
    if (at + 46 > dir.size() || le32(dir, at) != 0x02014b50)
      fail(path, "corrupt ZIP central directory");
    uint16_t method = le16(dir, at + 10);
    uint32_t compressed = le32(dir, at + 20), size = le32(dir, at + 24);
    uint16_t nameLen = le16(dir, at + 28), extraLen = le16(dir, at + 30),
             commentLen = le16(dir, at + 32);
    uint32_t local = le32(dir, at + 42);
    if (at + 46 + nameLen > dir.size())
      fail(path, "corrupt ZIP central directory");
    std::string member = dir.substr(at + 46, nameLen);
    at += 46 + nameLen + extraLen + commentLen;
    std::string name = member;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    if (names)
      names->push_back(name);
    if (only && !only->count(name))
      continue;
    if (compressed == 0xffffffff || size == 0xffffffff || local == 0xffffffff)
      fail(path, "ZIP64 archives (members over 4 GiB) are not supported");
    std::string header =
        file.read(local, 30, "corrupt ZIP member '" + member + "'");
    if (le32(header, 0) != 0x04034b50)
      fail(path, "corrupt ZIP member '" + member + "'");
    size_t data =
        static_cast<size_t>(local) + 30 + le16(header, 26) + le16(header, 28);
    std::string stored =
        file.read(data, compressed, "truncated ZIP member '" + member + "'");
    std::string bytes;
    if (method == 0)
      bytes = std::move(stored);
    else if (method == 8)
      bytes = inflateRaw(path, stored.data(), compressed, size);
    else
      fail(path, "member '" + member + "' uses unsupported compression " +
                     std::to_string(method));
    arrays[name] = parseNpy(bytes, path + ":" + name);
  }
  return arrays;
}

} // namespace

std::map<std::string, HostTensor> readNpz(const std::string &path) {
  return readMembers(path, nullptr, nullptr);
}

std::map<std::string, HostTensor> readNpz(const std::string &path,
                                          const std::set<std::string> *only) {
  return readMembers(path, only, nullptr);
}

std::vector<std::string> npzArrayNames(const std::string &path) {
  std::vector<std::string> names;
  std::set<std::string> none;
  readMembers(path, &none, &names);
  return names;
}

} // namespace gpipe::runtime
