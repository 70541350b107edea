#include "gpipe/runtime/Npy.h"
#include "gpipe/runtime/FileIO.h"

#include <cstring>
#include <limits>
#include <sstream>

namespace gpipe::runtime {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

struct DescrEntry {
  const char *descr;
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {
    {"<f2", DType::F16}, {"<f4", DType::F32}, {"<f8", DType::F64},
    {"|i1", DType::I8},  {"<i2", DType::I16}, {"<i4", DType::I32},
    {"<i8", DType::I64}, {"|u1", DType::U8},  {"<u2", DType::U16},
    {"<u4", DType::U32}, {"<u8", DType::U64}, {"|b1", DType::Bool},
};

[[noreturn]] void fail(const std::string &name, const std::string &reason) {
  throw NpyError(name + ": " + reason);
}

/// The value text of `key` in the header dict, up to the next top-level
/// comma or closing brace.
std::string headerValue(const std::string &header, const std::string &key,
                        const std::string &name) {
  std::string quoted = "'" + key + "'";
  size_t pos = header.find(quoted);
  if (pos == std::string::npos)
    fail(name, "the .npy header has no '" + key + "'");
  pos = header.find(':', pos + quoted.size());
  if (pos == std::string::npos)
    fail(name, "the .npy header is malformed");
  ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    char c = header[end];
    if (c == '(')
      ++depth;
    else if (c == ')')
      --depth;
    else if ((c == ',' || c == '}') && depth == 0)
      break;
  }
  std::string value = header.substr(pos, end - pos);
  size_t b = value.find_first_not_of(" \t");
  size_t e = value.find_last_not_of(" \t");
  return b == std::string::npos ? "" : value.substr(b, e - b + 1);
}

std::vector<int64_t> parseShape(const std::string &text,
                                const std::string &name) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    fail(name, "the .npy shape '" + text + "' is not a tuple");
  std::vector<int64_t> shape;
  std::string inner = text.substr(1, text.size() - 2);
  std::stringstream ss(inner);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t");
    if (b == std::string::npos)
      continue;
    item = item.substr(b, item.find_last_not_of(" \t") - b + 1);
    if (item.empty() || item.size() > 15 ||
        item.find_first_not_of("0123456789") != std::string::npos)
      fail(name, "the .npy shape '" + text + "' is not a tuple of sizes");
    shape.push_back(std::stoll(item));
  }
  return shape;
}

} // namespace

NpyHeader parseNpyHeader(std::string_view bytes, const std::string &name) {
  if (bytes.size() < kMagicSize + 4 ||
      std::memcmp(bytes.data(), kMagic, kMagicSize) != 0)
    fail(name, "not a .npy file (bad magic)");
  unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen = 0, offset = 0;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) |
                (static_cast<unsigned char>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      fail(name, "truncated .npy header");
    for (int i = 3; i >= 0; --i)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[8 + i]);
    offset = 12;
  } else {
    fail(name, "unsupported .npy format version " + std::to_string(major));
  }
  if (bytes.size() < offset + headerLen)
    fail(name, "truncated .npy header");
  std::string header(bytes.substr(offset, headerLen));
  NpyHeader parsed;
  parsed.dataOffset = offset + headerLen;

  std::string descr = headerValue(header, "descr", name);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"'))
    fail(name, "the .npy descr is malformed");
  descr = descr.substr(1, descr.size() - 2);
  bool known = false;
  for (const DescrEntry &e : kDescrs)
    if (descr == e.descr) {
      parsed.dtype = e.dtype;
      known = true;
    }
  if (!known)
    fail(name, "unsupported .npy dtype '" + descr +
                   "' (little-endian numeric and bool arrays only)");
  if (headerValue(header, "fortran_order", name) != "False")
    fail(name, "Fortran-ordered arrays are not supported (save with "
               "numpy.ascontiguousarray)");
  parsed.shape = parseShape(headerValue(header, "shape", name), name);

  int64_t count = 1;
  for (int64_t d : parsed.shape) {
    if (d != 0 && count > (int64_t(1) << 40) / d)
      fail(name, "the array is too large");
    count *= d;
  }
  parsed.dataBytes = static_cast<uint64_t>(count) * dtypeSize(parsed.dtype);
  return parsed;
}

HostTensor parseNpy(std::string_view bytes, const std::string &name) {
  NpyHeader header = parseNpyHeader(bytes, name);
  HostTensor tensor;
  tensor.dtype = header.dtype;
  tensor.shape = header.shape;
  size_t expected = header.dataBytes;
  if (bytes.size() - header.dataOffset != expected)
    fail(name, "the .npy data holds " +
                   std::to_string(bytes.size() - header.dataOffset) +
                   " bytes but " + tensor.describe() + " needs " +
                   std::to_string(expected));
  // assign, not memcpy: a zero-size array's data() may be null.
  const auto *data =
      reinterpret_cast<const std::byte *>(bytes.data() + header.dataOffset);
  tensor.data.assign(data, data + expected);
  return tensor;
}

HostTensor readNpy(const std::string &path) {
  std::optional<std::string> bytes = readFileBytes(path);
  if (!bytes)
    throw NpyError(path + ": cannot open the file");
  return parseNpy(*bytes, path);
}

std::string serializeNpy(const HostTensor &tensor) {
  // NumPy has no bfloat16: such tensors are written as their uint16 bits.
  const char *descr = "<u2";
  for (const DescrEntry &e : kDescrs)
    if (e.dtype == tensor.dtype)
      descr = e.descr;
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    shape += std::to_string(tensor.shape[i]) + ",";
  if (tensor.shape.size() > 1)
    shape.pop_back();
  shape += ")";
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes.
  size_t total = kMagicSize + 4 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char *>(tensor.data.data()),
             tensor.data.size());
  return out;
}

void writeNpy(const std::string &path, const HostTensor &tensor) {
  writeFileAtomically(path, serializeNpy(tensor));
}

} // namespace gpipe::runtime
