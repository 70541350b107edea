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

uint64_t le64(const std::string &b, size_t at) {
  return static_cast<uint64_t>(le32(b, at)) |
         (static_cast<uint64_t>(le32(b, at + 4)) << 32);
}

/// A member of the archive as its central directory lists it.
struct Member {
  std::string member, name; // name: without ".npy"
  uint16_t method = 0;
  uint64_t compressed = 0, size = 0, local = 0;
};

/// The members of the archive, in archive order. ZIP64 archives (numpy
/// writes one for members over 2 GiB; its central directory may lie past
/// 4 GiB) are read through their ZIP64 records.
std::vector<Member> listMembers(ArchiveFile &file, const std::string &path) {
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
  uint64_t entries = le16(tail, eocd + 10), dirSize = le32(tail, eocd + 12),
           dirAt = le32(tail, eocd + 16);
  if (entries == 0xffff || dirSize == 0xffffffff || dirAt == 0xffffffff) {
    // The ZIP64 end-of-central-directory locator lies just before.
    if (eocd < 20 || le32(tail, eocd - 20) != 0x07064b50)
      fail(path, "corrupt ZIP64 archive (no end-of-directory locator)");
    std::string record =
        file.read(le64(tail, eocd - 20 + 8), 56, "corrupt ZIP64 archive");
    if (le32(record, 0) != 0x06064b50)
      fail(path, "corrupt ZIP64 archive");
    entries = le64(record, 32);
    dirSize = le64(record, 40);
    dirAt = le64(record, 48);
  }
  std::string dir = file.read(dirAt, dirSize, "corrupt ZIP central directory");
  std::vector<Member> members;
  size_t at = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > dir.size() || le32(dir, at) != 0x02014b50)
      fail(path, "corrupt ZIP central directory");
    Member m;
    m.method = le16(dir, at + 10);
    m.compressed = le32(dir, at + 20);
    m.size = le32(dir, at + 24);
    uint16_t nameLen = le16(dir, at + 28), extraLen = le16(dir, at + 30),
             commentLen = le16(dir, at + 32);
    m.local = le32(dir, at + 42);
    if (at + 46 + nameLen + extraLen > dir.size())
      fail(path, "corrupt ZIP central directory");
    m.member = dir.substr(at + 46, nameLen);
    // The ZIP64 extra field (id 1) holds, in this order, the sizes and the
    // offset that the record gives as 0xffffffff.
    for (size_t x = at + 46 + nameLen; x + 4 <= at + 46 + nameLen + extraLen;) {
      uint16_t id = le16(dir, x), len = le16(dir, x + 2);
      if (x + 4 + len > at + 46 + nameLen + extraLen)
        fail(path, "corrupt ZIP central directory");
      if (id == 1) {
        size_t v = x + 4, stop = x + 4 + len;
        for (uint64_t *field : {&m.size, &m.compressed, &m.local})
          if (*field == 0xffffffff) {
            if (v + 8 > stop)
              fail(path, "corrupt ZIP64 extra field");
            *field = le64(dir, v);
            v += 8;
          }
      }
      x += 4 + len;
    }
    at += 46 + nameLen + extraLen + commentLen;
    m.name = m.member;
    if (m.name.size() > 4 && m.name.compare(m.name.size() - 4, 4, ".npy") == 0)
      m.name.resize(m.name.size() - 4);
    members.push_back(std::move(m));
  }
  return members;
}

/// Where member `m`'s data starts: after its local header.
uint64_t memberData(ArchiveFile &file, const std::string &path,
                    const Member &m) {
  std::string header =
      file.read(m.local, 30, "corrupt ZIP member '" + m.member + "'");
  if (le32(header, 0) != 0x04034b50)
    fail(path, "corrupt ZIP member '" + m.member + "'");
  return m.local + 30 + le16(header, 26) + le16(header, 28);
}

/// The arrays of `path` that `only` names (all when null); the names of
/// all its arrays into `names` when not null.
std::map<std::string, HostTensor> readMembers(const std::string &path,
                                              const std::set<std::string> *only,
                                              std::vector<std::string> *names) {
  ArchiveFile file(path);
  std::map<std::string, HostTensor> arrays;
  for (const Member &m : listMembers(file, path)) {
    if (names)
      names->push_back(m.name);
    if (only && !only->count(m.name))
      continue;
    if (m.method == 8 && (m.compressed >> 32 || m.size >> 32))
      fail(path, "member '" + m.member +
                     "' is compressed and over 4 GiB: save the data with "
                     "numpy.savez (not savez_compressed)");
    uint64_t data = memberData(file, path, m);
    std::string stored = file.read(data, m.compressed,
                                   "truncated ZIP member '" + m.member + "'");
    std::string bytes;
    if (m.method == 0)
      bytes = std::move(stored);
    else if (m.method == 8)
      bytes = inflateRaw(path, stored.data(), m.compressed, m.size);
    else
      fail(path, "member '" + m.member + "' uses unsupported compression " +
                     std::to_string(m.method));
    arrays[m.name] = parseNpy(bytes, path + ":" + m.name);
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

std::map<std::string, ArrayInFile>
locateNpzArrays(const std::string &path, const std::set<std::string> &only) {
  ArchiveFile file(path);
  std::map<std::string, ArrayInFile> located;
  for (const Member &m : listMembers(file, path)) {
    if (!only.count(m.name) || m.method != 0)
      continue;
    uint64_t data = memberData(file, path, m);
    // Its rows are read later, batch by batch: the whole member must be
    // in the file now.
    if (data > file.size() || m.compressed > file.size() - data)
      fail(path, "truncated ZIP member '" + m.member + "'");
    // A version 1 header is at most 10 + 65535 bytes, and numpy's are
    // much shorter: the member's first bytes up to that.
    std::string head =
        file.read(data, std::min<uint64_t>(m.compressed, 10 + 65535 + 2),
                  "truncated ZIP member '" + m.member + "'");
    NpyHeader header = parseNpyHeader(head, path + ":" + m.name);
    if (header.dataOffset + header.dataBytes != m.compressed)
      fail(path, "member '" + m.member + "' holds " +
                     std::to_string(m.compressed) + " bytes, its header says " +
                     std::to_string(header.dataOffset + header.dataBytes));
    located[m.name] = {path, data + header.dataOffset, header.dtype,
                       header.shape};
  }
  return located;
}

std::vector<std::string> npzArrayNames(const std::string &path) {
  std::vector<std::string> names;
  std::set<std::string> none;
  readMembers(path, &none, &names);
  return names;
}

} // namespace gpipe::runtime
