#include "gpipe/common/DType.h"

namespace gpipe {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name, mlirName;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::F16, "float16", "f16", 2}, {DType::BF16, "bfloat16", "bf16", 2},
    {DType::F32, "float32", "f32", 4}, {DType::F64, "float64", "f64", 8},
    {DType::I8, "int8", "i8", 1},      {DType::I16, "int16", "i16", 2},
    {DType::I32, "int32", "i32", 4},   {DType::I64, "int64", "i64", 8},
    {DType::U8, "uint8", "ui8", 1},    {DType::U16, "uint16", "ui16", 2},
    {DType::U32, "uint32", "ui32", 4}, {DType::U64, "uint64", "ui64", 8},
    {DType::Bool, "bool", "i1", 1}};

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

} // namespace gpipe
