// Host tensors: what the runtime reads from and writes to files.
#ifndef GPIPE_RUNTIME_TENSOR_H
#define GPIPE_RUNTIME_TENSOR_H

#include "gpipe/common/DType.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::runtime {

using ::gpipe::DType;
using ::gpipe::dtypeName;
using ::gpipe::dtypeSize;

/// A dense, C-ordered (row-major), little-endian host tensor.
struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  int64_t numElements() const;
  /// "float32[8, 784]".
  std::string describe() const;
};

/// `t` with dimension `axis` moved to the front ([T, N, E] -> [N, T, E] for
/// axis 1): the samples of an array in a sequence-first model's layout,
/// one after another.
HostTensor moveAxisToFront(const HostTensor &t, int64_t axis);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TENSOR_H
