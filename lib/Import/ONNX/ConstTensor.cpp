//===- ConstTensor.cpp - Tensors known at import time ---------------------===//
#include "ConstTensor.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/APFloat.h"

#include <cstring>

using namespace mlir;
using namespace gpipe::onnx_import;
using llvm::createStringError;
using llvm::inconvertibleErrorCode;

bool gpipe::onnx_import::isSupportedDType(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
  case DType::Float:
  case DType::UInt8:
  case DType::Int8:
  case DType::UInt16:
  case DType::Int16:
  case DType::Int32:
  case DType::Int64:
  case DType::Bool:
  case DType::Float16:
  case DType::Double:
  case DType::UInt32:
  case DType::UInt64:
  case DType::BFloat16:
    return true;
  }
  return false;
}

bool gpipe::onnx_import::isFloatDType(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 ||
         t == DType::BFloat16;
}

std::string gpipe::onnx_import::dtypeName(int32_t dtype) {
  if (onnx::TensorProto_DataType_IsValid(dtype))
    return onnx::TensorProto_DataType_Name(
        static_cast<onnx::TensorProto_DataType>(dtype));
  return "<invalid data type " + std::to_string(dtype) + ">";
}

llvm::Expected<Type> gpipe::onnx_import::elementTypeOf(MLIRContext *ctx,
                                                       int32_t dtype) {
  auto intType = [&](unsigned width, bool isUnsigned) -> Type {
    return IntegerType::get(
        ctx, width, isUnsigned ? IntegerType::Unsigned : IntegerType::Signless);
  };
  switch (static_cast<DType>(dtype)) {
  case DType::Float:
    return Float32Type::get(ctx);
  case DType::Double:
    return Float64Type::get(ctx);
  case DType::Float16:
    return Float16Type::get(ctx);
  case DType::BFloat16:
    return BFloat16Type::get(ctx);
  case DType::Int8:
    return intType(8, false);
  case DType::Int16:
    return intType(16, false);
  case DType::Int32:
    return intType(32, false);
  case DType::Int64:
    return intType(64, false);
  case DType::UInt8:
    return intType(8, true);
  case DType::UInt16:
    return intType(16, true);
  case DType::UInt32:
    return intType(32, true);
  case DType::UInt64:
    return intType(64, true);
  case DType::Bool:
    return intType(1, false);
  }
  return createStringError(inconvertibleErrorCode(),
                           "data type " + dtypeName(dtype) +
                               " is not supported (supported: float, double, "
                               "float16, bfloat16, int8-64, uint8-64, bool)");
}

std::optional<DType> gpipe::onnx_import::dtypeOf(Type type) {
  for (DType d :
       {DType::Float, DType::Double, DType::Float16, DType::BFloat16,
        DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8,
        DType::UInt16, DType::UInt32, DType::UInt64, DType::Bool}) {
    llvm::Expected<Type> t =
        elementTypeOf(type.getContext(), static_cast<int32_t>(d));
    if (t && *t == type)
      return d;
    if (!t)
      llvm::consumeError(t.takeError());
  }
  return std::nullopt;
}

int64_t ConstTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {
/// Saturating double -> int64 conversion (NaN becomes 0).
int64_t toInt(double v) {
  if (!(v == v))
    return 0;
  if (v >= 9.2e18)
    return INT64_MAX;
  if (v <= -9.2e18)
    return INT64_MIN;
  return static_cast<int64_t>(v);
}
} // namespace

int64_t ConstTensor::intAt(size_t i) const {
  // Saturating: a float constant read as integers (pads, shapes, ...) may be
  // out of int64's range.
  return isFloat() ? toInt(floats[i]) : ints[i];
}

double ConstTensor::floatAt(size_t i) const {
  return isFloat() ? floats[i] : static_cast<double>(ints[i]);
}

std::vector<int64_t> ConstTensor::toInts() const {
  std::vector<int64_t> out(numElements());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = intAt(i);
  return out;
}

ConstTensor ConstTensor::ofInts(llvm::ArrayRef<int64_t> values,
                                llvm::ArrayRef<int64_t> shape, DType dtype) {
  ConstTensor t;
  t.dtype = DType::Int64;
  t.shape.assign(shape.begin(), shape.end());
  t.ints.assign(values.begin(), values.end());
  return dtype == DType::Int64 ? t : t.castTo(dtype);
}

ConstTensor ConstTensor::ofFloats(llvm::ArrayRef<double> values,
                                  llvm::ArrayRef<int64_t> shape, DType dtype) {
  ConstTensor t;
  t.dtype = DType::Double;
  t.shape.assign(shape.begin(), shape.end());
  t.floats.assign(values.begin(), values.end());
  return dtype == DType::Double ? t : t.castTo(dtype);
}

namespace {
/// Wraps an integer to the range of `dtype` (C++ conversion semantics).
int64_t wrapInt(int64_t v, DType dtype) {
  switch (dtype) {
  case DType::Int8:
    return static_cast<int8_t>(v);
  case DType::Int16:
    return static_cast<int16_t>(v);
  case DType::Int32:
    return static_cast<int32_t>(v);
  case DType::UInt8:
    return static_cast<uint8_t>(v);
  case DType::UInt16:
    return static_cast<uint16_t>(v);
  case DType::UInt32:
    return static_cast<uint32_t>(v);
  case DType::Bool:
    return v != 0;
  default:
    return v;
  }
}

double roundFloat(double v, DType dtype) {
  if (dtype == DType::Float)
    return static_cast<float>(v);
  if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    llvm::APFloat f(v);
    bool lost;
    f.convert(dtype == DType::Float16 ? llvm::APFloat::IEEEhalf()
                                      : llvm::APFloat::BFloat(),
              llvm::APFloat::rmNearestTiesToEven, &lost);
    return f.convertToDouble();
  }
  return v;
}

} // namespace

ConstTensor ConstTensor::castTo(DType to) const {
  ConstTensor out;
  out.dtype = to;
  out.shape = shape;
  size_t n = numElements();
  if (isFloatDType(to)) {
    out.floats.resize(n);
    for (size_t i = 0; i < n; ++i)
      out.floats[i] = roundFloat(floatAt(i), to);
  } else {
    out.ints.resize(n);
    for (size_t i = 0; i < n; ++i)
      out.ints[i] = wrapInt(
          isFloat() ? (to == DType::Bool ? static_cast<int64_t>(floats[i] != 0)
                                         : toInt(floats[i]))
                    : ints[i],
          to);
  }
  return out;
}

/// An integer attribute from the two's-complement truncation of every
/// value to T, the element type's width (its signedness is in the element
/// type, not in the bits).
template <typename T>
static DenseElementsAttr integerAttr(RankedTensorType type,
                                     const std::vector<int64_t> &ints) {
  std::vector<T> values(ints.size());
  for (size_t i = 0; i < ints.size(); ++i)
    values[i] = static_cast<T>(static_cast<uint64_t>(ints[i]));
  return DenseElementsAttr::getFromRawBuffer(
      type, llvm::ArrayRef(reinterpret_cast<const char *>(values.data()),
                           values.size() * sizeof(T)));
}

DenseElementsAttr ConstTensor::toAttr(MLIRContext *ctx) const {
  Type elementType =
      llvm::cantFail(elementTypeOf(ctx, static_cast<int32_t>(dtype)));
  auto type = RankedTensorType::get(shape, elementType);
  size_t n = numElements();
  if (dtype == DType::Float) {
    std::vector<float> v(floats.begin(), floats.end());
    return DenseElementsAttr::get(type, llvm::ArrayRef(v));
  }
  if (dtype == DType::Double)
    return DenseElementsAttr::get(type, llvm::ArrayRef(floats));
  if (isFloat()) {
    const llvm::fltSemantics &sem =
        llvm::cast<FloatType>(elementType).getFloatSemantics();
    SmallVector<llvm::APFloat> v;
    for (double d : floats) {
      llvm::APFloat f(d);
      bool lost;
      f.convert(sem, llvm::APFloat::rmNearestTiesToEven, &lost);
      v.push_back(f);
    }
    return DenseElementsAttr::get(type, v);
  }
  if (dtype == DType::Bool) {
    SmallVector<bool> v;
    for (size_t i = 0; i < n; ++i)
      v.push_back(ints[i] != 0);
    return DenseElementsAttr::get(type, llvm::ArrayRef(v));
  }
  // Plain integers of the element's width: no APInt per element (a folded
  // Range or mask can hold millions).
  if (n == 0)
    return DenseElementsAttr::get(type, llvm::ArrayRef<llvm::APInt>{});
  switch (elementType.getIntOrFloatBitWidth()) {
  case 64:
    return integerAttr<uint64_t>(type, ints);
  case 32:
    return integerAttr<uint32_t>(type, ints);
  case 16:
    return integerAttr<uint16_t>(type, ints);
  default:
    return integerAttr<uint8_t>(type, ints);
  }
}

namespace {
llvm::Error fail(const onnx::TensorProto &proto, const llvm::Twine &reason) {
  return createStringError(inconvertibleErrorCode(),
                           "tensor '" + proto.name() + "': " + reason.str());
}

size_t byteWidth(DType t) {
  switch (t) {
  case DType::Bool:
  case DType::Int8:
  case DType::UInt8:
    return 1;
  case DType::Int16:
  case DType::UInt16:
  case DType::Float16:
  case DType::BFloat16:
    return 2;
  case DType::Int32:
  case DType::UInt32:
  case DType::Float:
    return 4;
  default:
    return 8;
  }
}

double halfBitsToDouble(uint16_t bits, DType t) {
  if (t == DType::BFloat16) {
    uint32_t word = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, 4);
    return f;
  }
  return llvm::APFloat(llvm::APFloat::IEEEhalf(), llvm::APInt(16, bits))
      .convertToDouble();
}

/// Checks type, dims and data size; returns the element count.
llvm::Expected<int64_t> validate(const onnx::TensorProto &proto) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    return fail(proto, "external data is not supported; save the model with "
                       "all tensors inside the file");
  if (proto.has_segment())
    return fail(proto, "segmented tensors are not supported");
  if (!isSupportedDType(proto.data_type()))
    return fail(proto, "data type " + dtypeName(proto.data_type()) +
                           " is not supported");
  int64_t n = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0)
      return fail(proto, "negative dimension " + llvm::Twine(d));
    // Each dimension too, so that shape arithmetic on an empty tensor's
    // other dimensions cannot overflow.
    if (d > (int64_t(1) << 40))
      return fail(proto, "dimension " + llvm::Twine(d) + " is over 2^40");
    if (d > 0 && n > (int64_t(1) << 40) / d)
      return fail(proto, "more than 2^40 elements");
    n *= d;
  }
  DType t = static_cast<DType>(proto.data_type());
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != static_cast<size_t>(n) * byteWidth(t))
      return fail(proto, "raw_data holds " +
                             llvm::Twine(proto.raw_data().size()) +
                             " bytes but " + llvm::Twine(n) + " elements of " +
                             dtypeName(proto.data_type()) + " need " +
                             llvm::Twine(n * byteWidth(t)));
    return n;
  }
  int64_t have = 0;
  switch (t) {
  case DType::Float:
    have = proto.float_data_size();
    break;
  case DType::Double:
    have = proto.double_data_size();
    break;
  case DType::Int64:
    have = proto.int64_data_size();
    break;
  case DType::UInt32:
  case DType::UInt64:
    have = proto.uint64_data_size();
    break;
  default:
    have = proto.int32_data_size();
    break;
  }
  if (have != n)
    return fail(proto, "holds " + llvm::Twine(have) + " values but its dims " +
                           "need " + llvm::Twine(n));
  return n;
}

template <typename T> T readRaw(const std::string &raw, size_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}
} // namespace

llvm::Error gpipe::onnx_import::checkTensor(const onnx::TensorProto &proto) {
  auto count = validate(proto);
  return count ? llvm::Error::success() : count.takeError();
}

llvm::Expected<ConstTensor>
gpipe::onnx_import::decodeTensor(const onnx::TensorProto &proto) {
  auto count = validate(proto);
  if (!count)
    return count.takeError();
  ConstTensor t;
  t.dtype = static_cast<DType>(proto.data_type());
  t.shape.assign(proto.dims().begin(), proto.dims().end());
  size_t n = *count;
  const std::string &raw = proto.raw_data();
  bool isRaw = proto.has_raw_data();
  if (t.isFloat()) {
    t.floats.resize(n);
    for (size_t i = 0; i < n; ++i) {
      switch (t.dtype) {
      case DType::Float:
        t.floats[i] = isRaw ? readRaw<float>(raw, i) : proto.float_data(i);
        break;
      case DType::Double:
        t.floats[i] = isRaw ? readRaw<double>(raw, i) : proto.double_data(i);
        break;
      default:
        t.floats[i] =
            halfBitsToDouble(isRaw ? readRaw<uint16_t>(raw, i)
                                   : static_cast<uint16_t>(proto.int32_data(i)),
                             t.dtype);
      }
    }
    return t;
  }
  t.ints.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t v = 0;
    switch (t.dtype) {
    case DType::Int64:
      v = isRaw ? readRaw<int64_t>(raw, i) : proto.int64_data(i);
      break;
    case DType::UInt64:
      v = isRaw ? static_cast<int64_t>(readRaw<uint64_t>(raw, i))
                : static_cast<int64_t>(proto.uint64_data(i));
      break;
    case DType::UInt32:
      v = isRaw ? readRaw<uint32_t>(raw, i)
                : static_cast<uint32_t>(proto.uint64_data(i));
      break;
    case DType::Int32:
      v = isRaw ? readRaw<int32_t>(raw, i) : proto.int32_data(i);
      break;
    case DType::Int16:
      v = isRaw ? readRaw<int16_t>(raw, i) : proto.int32_data(i);
      break;
    case DType::UInt16:
      v = isRaw ? readRaw<uint16_t>(raw, i) : proto.int32_data(i);
      break;
    case DType::Int8:
      v = isRaw ? readRaw<int8_t>(raw, i) : proto.int32_data(i);
      break;
    case DType::UInt8:
    case DType::Bool:
      v = isRaw ? readRaw<uint8_t>(raw, i) : proto.int32_data(i);
      break;
    default:
      break;
    }
    t.ints[i] = wrapInt(v, t.dtype);
  }
  return t;
}

llvm::Expected<std::vector<char>>
gpipe::onnx_import::floatTensorBytes(const onnx::TensorProto &proto) {
  auto count = validate(proto);
  if (!count)
    return count.takeError();
  DType t = static_cast<DType>(proto.data_type());
  if (!isFloatDType(t))
    return fail(proto, "is not a floating-point tensor");
  size_t n = *count, width = byteWidth(t);
  std::vector<char> bytes(n * width);
  if (proto.has_raw_data()) {
    // assign, not memcpy: an empty tensor's data() may be null.
    bytes.assign(proto.raw_data().begin(), proto.raw_data().end());
    return bytes;
  }
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::Float) {
      float v = proto.float_data(i);
      std::memcpy(&bytes[i * 4], &v, 4);
    } else if (t == DType::Double) {
      double v = proto.double_data(i);
      std::memcpy(&bytes[i * 8], &v, 8);
    } else {
      uint16_t v = static_cast<uint16_t>(proto.int32_data(i));
      std::memcpy(&bytes[i * 2], &v, 2);
    }
  }
  return bytes;
}
