#include "gpipe/common/DType.h"

namespace gpipe {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name, mlirName;
  size_t size;
  int onnxType; // onnx.TensorProto.DataType
};

constexpr DTypeInfo kDTypes[] = {{DType::F16, "float16", "f16", 2, 10},
                                 {DType::BF16, "bfloat16", "bf16", 2, 16},
                                 {DType::F32, "float32", "f32", 4, 1},
                                 {DType::F64, "float64", "f64", 8, 11},
                                 {DType::I8, "int8", "i8", 1, 3},
                                 {DType::I16, "int16", "i16", 2, 5},
                                 {DType::I32, "int32", "i32", 4, 6},
                                 {DType::I64, "int64", "i64", 8, 7},
                                 {DType::U8, "uint8", "ui8", 1, 2},
                                 {DType::U16, "uint16", "ui16", 2, 4},
                                 {DType::U32, "uint32", "ui32", 4, 12},
                                 {DType::U64, "uint64", "ui64", 8, 13},
                                 {DType::Bool, "bool", "i1", 1, 9}};

const DTypeInfo &info(DType dtype) {
  for (const DTypeInfo &i : kDTypes)
    if (i.dtype == dtype)
      return i;
  return kDTypes[2];
}
} // namespace

size_t dtypeSize(DType dtype) { return info(dtype).size; }
std::string_view dtypeName(DType dtype) { return info(dtype).name; }
std::string_view dtypeMlirName(DType dtype) { return info(dtype).mlirName; }
int dtypeOnnxType(DType dtype) { return info(dtype).onnxType; }

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const DTypeInfo &i : kDTypes)
    if (i.name == name)
      return i.dtype;
  return std::nullopt;
}

std::optional<DType> dtypeFromMlirName(std::string_view name) {
  for (const DTypeInfo &i : kDTypes)
    if (i.mlirName == name)
      return i.dtype;
  return std::nullopt;
}

std::optional<DType> dtypeFromOnnxType(int onnxType) {
  for (const DTypeInfo &i : kDTypes)
    if (i.onnxType == onnxType)
      return i.dtype;
  return std::nullopt;
}

} // namespace gpipe
