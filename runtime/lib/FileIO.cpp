#include "gpipe/runtime/FileIO.h"

#include <cstdio>
#include <fstream>
#include <iterator>

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
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw FileWriteError(path + ": cannot create " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      throw FileWriteError(path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw FileWriteError(path + ": cannot move " + tmp + " into place");
  }
}

} // namespace gpipe::runtime
