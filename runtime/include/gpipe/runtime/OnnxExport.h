// Writing trained parameters back into an ONNX model.
#ifndef GPIPE_RUNTIME_ONNXEXPORT_H
#define GPIPE_RUNTIME_ONNXEXPORT_H

#include "gpipe/runtime/Tensor.h"

#include <map>
#include <string>

namespace gpipe::runtime {

/// Which graph writeOnnxWithParameters writes.
enum class OnnxGraphMode {
  /// BatchNormalization with training_mode=0 (running statistics) and
  /// Dropout without its training_mode input (the identity).
  Inference,
  /// The graph as exported (training-mode ops kept).
  AsExported
};

/// Copies the ONNX model at `modelPath` to `outPath` (atomically: a
/// temporary file renamed into place), replacing the data of every
/// initializer named in `parameters` with the given values (raw_data, same
/// dims and type), as an inference model unless `mode` says otherwise.
/// Everything else is kept (the model goes through ONNX's protobuf classes,
/// unknown fields included). Returns how many initializers were replaced;
/// throws if a parameter has no initializer of the same size and type.
size_t
writeOnnxWithParameters(const std::string &modelPath,
                        const std::map<std::string, HostTensor> &parameters,
                        const std::string &outPath,
                        OnnxGraphMode mode = OnnxGraphMode::Inference);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_ONNXEXPORT_H
