#include "gpipe/runtime/Idx.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace gpipe::runtime {

namespace {

std::string readAll(const std::string &path) {
  gzFile f = gzopen(path.c_str(), "rb"); // reads plain files too
  if (!f)
    throw std::runtime_error(path + ": cannot open the file");
  std::string data;
  char buffer[1 << 16];
  int n;
  while ((n = gzread(f, buffer, sizeof(buffer))) > 0)
    data.append(buffer, n);
  bool failed = n < 0;
  gzclose(f);
  if (failed)
    throw std::runtime_error(path + ": corrupt gzip data");
  return data;
}

uint32_t be32(const std::string &b, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(b[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(b[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(b[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3]));
}

std::string pick(const std::string &dir, const std::string &name) {
  for (const char *suffix : {"", ".gz"})
    if (std::filesystem::exists(dir + "/" + name + suffix))
      return dir + "/" + name + suffix;
  throw std::runtime_error(dir + ": no " + name + " (or " + name + ".gz)");
}

} // namespace

HostTensor readIdx(const std::string &path) {
  std::string b = readAll(path);
  if (b.size() < 4 || b[0] != 0 || b[1] != 0)
    throw std::runtime_error(path + ": not an IDX file");
  if (static_cast<unsigned char>(b[2]) != 0x08)
    throw std::runtime_error(path + ": only unsigned-byte IDX files are "
                                    "supported");
  int rank = static_cast<unsigned char>(b[3]);
  if (b.size() < 4 + 4 * static_cast<size_t>(rank))
    throw std::runtime_error(path + ": truncated IDX header");
  HostTensor t;
  t.dtype = DType::U8;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    int64_t d = be32(b, 4 + 4 * i);
    // The element count stays below 2^40, far from overflowing.
    if (d > (int64_t(1) << 31) || (d != 0 && count > (int64_t(1) << 40) / d))
      throw std::runtime_error(path + ": invalid IDX dimension");
    t.shape.push_back(d);
    count *= d;
  }
  size_t offset = 4 + 4 * rank;
  if (b.size() - offset != static_cast<size_t>(count))
    throw std::runtime_error(
        path + ": IDX data holds " + std::to_string(b.size() - offset) +
        " bytes, its dimensions need " + std::to_string(count));
  // assign, not memcpy: with a zero dimension data() may be null.
  const auto *data = reinterpret_cast<const std::byte *>(b.data() + offset);
  t.data.assign(data, data + count);
  return t;
}

ImageDataset readIdxDataset(const std::string &dir, const std::string &split) {
  HostTensor images = readIdx(pick(dir, split + "-images-idx3-ubyte"));
  HostTensor labels = readIdx(pick(dir, split + "-labels-idx1-ubyte"));
  if (images.shape.size() != 3 || labels.shape.size() != 1 ||
      images.shape[0] != labels.shape[0])
    throw std::runtime_error(dir + ": " + split +
                             " images and labels do not match");
  ImageDataset ds;
  int64_t n = images.shape[0];
  ds.images.dtype = DType::F32;
  ds.images.shape = {n, 1, images.shape[1], images.shape[2]};
  ds.images.data.resize(images.data.size() * sizeof(float));
  auto *f = reinterpret_cast<float *>(ds.images.data.data());
  for (size_t i = 0; i < images.data.size(); ++i)
    f[i] = static_cast<float>(static_cast<uint8_t>(images.data[i])) / 255.0f;
  ds.labels.dtype = DType::I64;
  ds.labels.shape = {n};
  ds.labels.data.resize(n * sizeof(int64_t));
  auto *l = reinterpret_cast<int64_t *>(ds.labels.data.data());
  for (int64_t i = 0; i < n; ++i)
    l[i] = static_cast<uint8_t>(labels.data[i]);
  return ds;
}

} // namespace gpipe::runtime
