// libFuzzer target for the ONNX TensorProto reader
// (runtime/lib/TensorProto.cpp): errors are exceptions derived from
// std::exception; anything else is a finding.
#include "gpipe/runtime/TensorProto.h"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try {
    gpipe::runtime::parseTensorProto(
        std::string_view(reinterpret_cast<const char *>(data), size),
        "fuzz.pb");
  } catch (const std::exception &) {
  }
  return 0;
}
