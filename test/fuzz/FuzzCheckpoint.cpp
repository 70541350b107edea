// libFuzzer target for the checkpoint reader (runtime/lib/Checkpoint.cpp): the
// input, its last 4 bytes replaced by the CRC-32 of the others (so that
// mutations get past the checksum to the parser), is written to a file in a
// directory of this process's own, which readCheckpoint then reads. Errors are
// exceptions derived from std::exception; anything else is a finding.
#include "Checkpoint.h"
#include "FuzzInputFile.h"
#include "gpipe/runtime/Bundle.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  if (size >= 4) {
    uint32_t crc = gpipe::runtime::crc32Of(bytes.data(), size - 4);
    std::memcpy(bytes.data() + size - 4, &crc, 4);
  }
  std::string path = gpipe::fuzz::writeInputFile(bytes, "checkpoint.bin");
  try {
    gpipe::runtime::readCheckpoint(path);
  } catch (const std::exception &) {
  }
  return 0;
}
