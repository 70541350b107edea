// ONNX TensorProto files (.pb), as the ONNX backend test data stores
// tensors, read with ONNX's protobuf classes.
#ifndef GPIPE_RUNTIME_TENSORPROTO_H
#define GPIPE_RUNTIME_TENSORPROTO_H

#include "gpipe/runtime/Tensor.h"

#include <stdexcept>
#include <string>
#include <string_view>

namespace gpipe::runtime {

class TensorProtoError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Decodes a serialized onnx.TensorProto (raw_data, or the typed field
/// onnx.proto assigns to its data type); `name` is used in error messages.
HostTensor parseTensorProto(std::string_view bytes, const std::string &name);
HostTensor readTensorProto(const std::string &path);

/// Reads a tensor file by its extension: .npy or .pb.
HostTensor readTensorFile(const std::string &path);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TENSORPROTO_H
