// Element types: one table for the manifest's names (NumPy's), MLIR's
// spellings, ONNX's TensorProto.DataType codes and sizes.
#ifndef GPIPE_COMMON_DTYPE_H
#define GPIPE_COMMON_DTYPE_H

#include <cstddef>
#include <optional>
#include <string_view>

namespace gpipe {

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

/// Bytes of one element (a bool is one byte).
size_t dtypeSize(DType dtype);
/// The manifest's name: "float32", "int64", "bool", ...
std::string_view dtypeName(DType dtype);
/// MLIR's spelling of the element type: "f32", "i64", "i1", ...
std::string_view dtypeMlirName(DType dtype);
/// ONNX's TensorProto.DataType code: 1 for float32, 7 for int64, ...
int dtypeOnnxType(DType dtype);
/// The type of a manifest name, or none.
std::optional<DType> dtypeFromName(std::string_view name);
/// The type of an MLIR spelling, or none.
std::optional<DType> dtypeFromMlirName(std::string_view name);

/// The type of an ONNX TensorProto.DataType code, or none (string,
/// complex, float8, ...).
std::optional<DType> dtypeFromOnnxType(int onnxType);

} // namespace gpipe

#endif // GPIPE_COMMON_DTYPE_H
