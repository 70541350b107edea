#include "gpipe/runtime/FileIO.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <unistd.h>

namespace gpipe::runtime {

std::optional<std::string> readFileBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

void writeFileAtomically(const std::string &path, std::string_view bytes) {
  std::string tmp = path + ".tmp";
  auto fail = [&](const char *what, int error) {
    std::remove(tmp.c_str());
    throw FileWriteError(path + ": " + what + ": " + std::strerror(error) +
                         (error == ENOSPC || error == EDQUOT
                              ? " (free some space; the previous file, if "
                                "any, is unchanged)"
                              : ""));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw FileWriteError(path + ": cannot create " + tmp + ": " +
                         std::strerror(errno));
  const char *data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int error = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail("write failed", error);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  // On disk before it replaces the old file: a crash leaves one or the
  // other, never a file of the new name and no content.
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    fail("write failed", error);
  }
  if (::close(fd) != 0)
    fail("write failed", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail(("cannot move " + tmp + " into place").c_str(), errno);
}

} // namespace gpipe::runtime
