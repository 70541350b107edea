// For fuzz targets of readers that take a path: each input is written to one
// file in a directory of this process's own (created on first use, removed
// at exit).
#ifndef GPIPE_TEST_FUZZ_FUZZINPUTFILE_H
#define GPIPE_TEST_FUZZ_FUZZINPUTFILE_H

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace gpipe::fuzz {

inline std::string &fuzzTempDir() {
  static std::string dir;
  return dir;
}

/// Writes `bytes` to `<temp dir>/<fileName>` and returns that path; aborts
/// (a harness error, not a finding in the reader) if it cannot.
inline std::string writeInputFile(std::string_view bytes,
                                  const char *fileName) {
  static const bool created = [] {
    std::string &dir = fuzzTempDir();
    dir =
        (std::filesystem::temp_directory_path() / "gpipe-fuzz-XXXXXX").string();
    if (!mkdtemp(dir.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(fuzzTempDir(), ignored);
    });
    return true;
  }();
  (void)created;
  std::string path = fuzzTempDir() + "/" + fileName;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

} // namespace gpipe::fuzz

#endif // GPIPE_TEST_FUZZ_FUZZINPUTFILE_H
