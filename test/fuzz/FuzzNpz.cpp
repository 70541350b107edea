// libFuzzer target for the .npz reader (runtime/lib/Npz.cpp): the input is
// written to a file in a directory of this process's own, which readNpz then
// reads. Errors are exceptions derived from std::exception; anything else is a
// finding.
#include "FuzzInputFile.h"
#include "gpipe/runtime/Npy.h"

#include <cstddef>
#include <cstdint>
#include <exception>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = gpipe::fuzz::writeInputFile(
      std::string_view(reinterpret_cast<const char *>(data), size),
      "input.npz");
  try {
    gpipe::runtime::readNpz(path);
  } catch (const std::exception &) {
  }
  return 0;
}
