#include "Checkpoint.h"

#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/FileIO.h"

#include <cstring>

namespace gpipe::runtime {

namespace {
/// 04: the model is identified by its stages' parameter checksums.
/// 05: the global batch a step took is recorded.
constexpr char kCheckpointMagic[8] = {'G', 'P', 'C', 'K', 'P', 'T', '0', '5'};

template <typename T> void put(std::string &out, const T &v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}
} // namespace

void writeCheckpoint(const std::string &path, const Checkpoint &c) {
  std::string out(kCheckpointMagic, sizeof(kCheckpointMagic));
  put<uint32_t>(out, c.model);
  put<int64_t>(out, c.steps);
  put<int64_t>(out, c.batch);
  put<uint64_t>(out, c.extra);
  put<uint64_t>(out, c.tensors.size());
  for (const std::string &t : c.tensors) {
    put<uint64_t>(out, t.size());
    out += t;
  }
  put<uint32_t>(out, crc32Of(out.data(), out.size()));
  writeFileAtomically(path, out);
}

Checkpoint readCheckpoint(const std::string &path) {
  std::optional<std::string> file = readFileBytes(path);
  if (!file)
    throw BundleError(path + ": cannot open the checkpoint");
  std::string &in = *file;
  size_t at = 0;
  auto fail = [&](const std::string &why) -> BundleError {
    return BundleError(path + ": " + why);
  };
  auto take = [&](size_t n) {
    if (n > in.size() - at)
      throw fail("truncated checkpoint");
    const char *p = in.data() + at;
    at += n;
    return p;
  };
  auto get = [&](auto &v) { std::memcpy(&v, take(sizeof(v)), sizeof(v)); };
  if (in.size() < sizeof(kCheckpointMagic) + 4 ||
      std::memcmp(in.data(), kCheckpointMagic, 6) != 0)
    throw fail("not a gpipe checkpoint");
  if (std::memcmp(in.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0)
    throw fail("checkpoint format " + in.substr(6, 2) +
               " of another gpipe version; this one reads format " +
               std::string(kCheckpointMagic + 6, 2) +
               " (train again without --resume)");
  uint32_t stored;
  std::memcpy(&stored, in.data() + in.size() - 4, 4);
  if (crc32Of(in.data(), in.size() - 4) != stored)
    throw fail("checksum mismatch (the checkpoint is corrupt)");
  in.resize(in.size() - 4);
  take(sizeof(kCheckpointMagic));
  Checkpoint c;
  uint64_t count;
  get(c.model);
  get(c.steps);
  get(c.batch);
  get(c.extra);
  get(count);
  if (count > in.size())
    throw fail("truncated checkpoint");
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t bytes;
    get(bytes);
    c.tensors.emplace_back(take(bytes), bytes);
  }
  return c;
}

} // namespace gpipe::runtime
