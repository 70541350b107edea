//===- ConstTensor.h - Tensors known at import time -------------*- C++ -*-===//
//
// A small host-side tensor: decoded ONNX initializers and Constant nodes,
// and the results of folding shape computations (Shape, Gather, Concat, ...)
// that must be static in gpipe.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_LIB_IMPORT_ONNX_CONSTTENSOR_H
#define GPIPE_LIB_IMPORT_ONNX_CONSTTENSOR_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace gpipe::onnx_import {

/// ONNX TensorProto.DataType values gpipe handles.
enum class DType : int32_t {
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  BFloat16 = 16,
};

bool isFloatDType(DType t);
bool isSupportedDType(int32_t dtype);
/// Name of an ONNX data type number, for messages ("FLOAT", "STRING", ...).
std::string dtypeName(int32_t dtype);
/// The MLIR element type of an ONNX data type, or an error for types gpipe
/// does not handle (strings, complex).
llvm::Expected<mlir::Type> elementTypeOf(mlir::MLIRContext *ctx, int32_t dtype);
/// The ONNX data type of an MLIR element type (the inverse of
/// elementTypeOf), or nullopt for one gpipe does not handle.
std::optional<DType> dtypeOf(mlir::Type type);

/// The largest tensor the importer folds on the host (elements; a causal
/// mask of 4096 x 4096 is 2^24), and the most it holds folded in all.
constexpr int64_t kMaxFoldedElements = int64_t(1) << 24;
constexpr int64_t kMaxFoldedElementsInAll = int64_t(1) << 25;

struct ConstTensor {
  DType dtype = DType::Float;
  llvm::SmallVector<int64_t> shape;
  /// Exactly one of these holds numElements() values, by isFloatDType.
  std::vector<double> floats;
  std::vector<int64_t> ints;

  int64_t numElements() const;
  bool isFloat() const { return isFloatDType(dtype); }
  /// Element i as an integer / as a double, whatever the storage.
  int64_t intAt(size_t i) const;
  double floatAt(size_t i) const;
  /// All elements as integers (for shapes, axes, indices).
  std::vector<int64_t> toInts() const;

  static ConstTensor ofInts(llvm::ArrayRef<int64_t> values,
                            llvm::ArrayRef<int64_t> shape,
                            DType dtype = DType::Int64);
  static ConstTensor ofFloats(llvm::ArrayRef<double> values,
                              llvm::ArrayRef<int64_t> shape,
                              DType dtype = DType::Float);

  /// Convert to another data type with C++ cast semantics.
  ConstTensor castTo(DType to) const;
  /// The value as a builtin dense attribute of `type`'s shape.
  mlir::DenseElementsAttr toAttr(mlir::MLIRContext *ctx) const;
};

/// Checks that a tensor can be decoded (type, dims, data size).
llvm::Error checkTensor(const onnx::TensorProto &proto);

/// Decodes an ONNX tensor (raw_data or typed fields). Fails with a reason on
/// external data, unsupported types, negative dims and size mismatches.
llvm::Expected<ConstTensor> decodeTensor(const onnx::TensorProto &proto);

/// Little-endian bytes of a floating-point tensor laid out as its MLIR type
/// stores it (for dense resource blobs). Requires a float dtype.
llvm::Expected<std::vector<char>>
floatTensorBytes(const onnx::TensorProto &proto);

} // namespace gpipe::onnx_import

#endif // GPIPE_LIB_IMPORT_ONNX_CONSTTENSOR_H
