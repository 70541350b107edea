// libFuzzer target for the .npy parser (runtime/lib/Npy.cpp): errors are
// exceptions derived from std::exception; anything else is a finding.
#include "gpipe/runtime/Npy.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    gpipe::runtime::parseNpy(
        std::string_view(reinterpret_cast<const char *>(data), size),
        "fuzz.npy");
  } catch (const std::exception &) {
  }
  return 0;
}
