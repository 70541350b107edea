// libFuzzer target for the bundle manifest reader (loadBundle,
// runtime/lib/Bundle.cpp). The input is the manifest: it is written as
// manifest.json, with its CRC-32 as manifest.crc32, into a bundle directory
// of this process's own that holds the part files of the seed bundles
// (corpus/bundle-parts: the seed manifests name them), so that a manifest
// gets past the checksum to every later check. Errors are exceptions derived
// from std::exception; anything else is a finding.
#include "gpipe/runtime/Bundle.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#ifndef GPIPE_FUZZ_BUNDLE_PARTS
#define GPIPE_FUZZ_BUNDLE_PARTS ""
#endif

namespace fs = std::filesystem;

namespace {

std::string bundleDir;

void removeBundleDir() {
  std::error_code ignored;
  fs::remove_all(bundleDir, ignored);
}

void writeFile(const std::string &path, const void *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char *>(data),
            static_cast<std::streamsize>(size));
  if (!out) {
    std::perror(path.c_str());
    std::abort();
  }
}

/// The bundle directory, created once per process with the seed bundles'
/// parts ($GPIPE_FUZZ_BUNDLE_PARTS overrides where they are).
const std::string &bundlePath() {
  static const std::string path = [] {
    bundleDir = (fs::temp_directory_path() / "gpipe-fuzz-XXXXXX").string();
    if (!mkdtemp(bundleDir.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::atexit(removeBundleDir);
    const char *env = std::getenv("GPIPE_FUZZ_BUNDLE_PARTS");
    fs::path parts = env && *env ? env : GPIPE_FUZZ_BUNDLE_PARTS;
    std::error_code error;
    for (const fs::directory_entry &e : fs::directory_iterator(parts, error))
      if (!fs::copy_file(e.path(), fs::path(bundleDir) / e.path().filename(),
                         error))
        break;
    if (error) {
      std::fprintf(stderr, "cannot copy the bundle parts from '%s': %s\n",
                   parts.c_str(), error.message().c_str());
      std::abort();
    }
    return bundleDir;
  }();
  return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = bundlePath();
  writeFile(dir + "/manifest.json", data, size);
  std::string crc = std::to_string(gpipe::runtime::crc32Of(data, size));
  writeFile(dir + "/manifest.crc32", crc.data(), crc.size());
  // GPIPE_FUZZ_VERBOSE=1: print why a manifest is refused (checking seeds).
  static const bool verbose = std::getenv("GPIPE_FUZZ_VERBOSE") != nullptr;
  try {
    gpipe::runtime::loadBundle(dir);
    if (verbose)
      std::fprintf(stderr, "loaded\n");
  } catch (const std::exception &e) {
    if (verbose)
      std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
