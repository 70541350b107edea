// Host tensors: what the runtime reads from and writes to files.
#ifndef GPIPE_RUNTIME_TENSOR_H
#define GPIPE_RUNTIME_TENSOR_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::runtime {

enum class DType {
  F16,
  BF16,
  F32,
  F64,
  I8,
  I16,
  I32,
  I64,
  U8,
  U16,
  U32,
  U64,
  Bool
};

/// Bytes of one element.
size_t dtypeSize(DType dtype);
/// "float32", "int64", ...
std::string dtypeName(DType dtype);

/// A dense, C-ordered (row-major), little-endian host tensor.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  int64_t numElements() const;
  /// "float32[8, 784]".
  std::string describe() const;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TENSOR_H
