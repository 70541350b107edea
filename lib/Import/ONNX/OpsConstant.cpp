//===- OpsConstant.cpp - Importers of compile-time values -----------------===//
//
// Constant, Shape, ConstantOfShape and Range produce values known at compile
// time; they never become ops unless a compute op consumes them.
//
//===----------------------------------------------------------------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "onnx/onnx_pb.h"

#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

LogicalResult importConstant(GraphImporter &g) {
  if (failed(g.checkAttrs({"value", "value_float", "value_floats", "value_int",
                           "value_ints", "value_string", "value_strings",
                           "sparse_value"})))
    return failure();
  if (g.getNode().attribute_size() != 1)
    return g.error() << "needs exactly one value attribute, got "
                     << g.getNode().attribute_size();
  const onnx::AttributeProto &a = g.getNode().attribute(0);
  StringRef name = a.name();
  if (name == "value") {
    if (!a.has_t())
      return g.error() << "attribute 'value' must be TENSOR";
    auto tensor = decodeTensor(a.t());
    if (!tensor)
      return g.error() << llvm::toString(tensor.takeError());
    g.setConstantOutput(0, std::move(*tensor));
  } else if (name == "value_float") {
    g.setConstantOutput(0, ConstTensor::ofFloats({g.floatAttr(name, 0)}, {}));
  } else if (name == "value_floats") {
    SmallVector<double> v(a.floats().begin(), a.floats().end());
    g.setConstantOutput(
        0, ConstTensor::ofFloats(v, {static_cast<int64_t>(v.size())}));
  } else if (name == "value_int") {
    g.setConstantOutput(0, ConstTensor::ofInts({g.intAttr(name, 0)}, {}));
  } else if (name == "value_ints") {
    auto v = g.intsAttr(name);
    if (!v)
      return failure();
    g.setConstantOutput(
        0, ConstTensor::ofInts(*v, {static_cast<int64_t>(v->size())}));
  } else {
    return g.error() << "attribute '" << name
                     << "' is not supported (string and sparse constants)";
  }
  return success(!g.failed());
}

LogicalResult importShape(GraphImporter &g) {
  if (failed(g.checkAttrs({"start", "end"})))
    return failure();
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  int64_t rank = type->getRank();
  auto clampAxis = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  int64_t start = clampAxis(g.intAttr("start", 0));
  int64_t end = clampAxis(g.intAttr("end", rank));
  SmallVector<int64_t> dims;
  for (int64_t i = start; i < end; ++i)
    dims.push_back(type->getDimSize(i));
  g.setConstantOutput(
      0, ConstTensor::ofInts(dims, {static_cast<int64_t>(dims.size())}));
  return success(!g.failed());
}

LogicalResult importConstantOfShape(GraphImporter &g) {
  if (failed(g.checkAttrs({"value"})))
    return failure();
  auto shapeTensor = g.requireConstant(0, "the shape");
  if (failed(shapeTensor))
    return failure();
  SmallVector<int64_t> shape;
  int64_t count = 1;
  for (int64_t d : (*shapeTensor)->toInts()) {
    if (d < 0 || (d > 0 && count > kMaxFoldedElements / d))
      return g.error() << "shape entry " << d
                       << " is negative or makes the tensor larger than "
                       << kMaxFoldedElements << " elements";
    count *= d;
    shape.push_back(d);
  }
  ConstTensor fill = ConstTensor::ofFloats({0.0}, {1});
  if (const onnx::AttributeProto *a = g.attr("value")) {
    if (!a->has_t())
      return g.error() << "attribute 'value' must be TENSOR";
    auto decoded = decodeTensor(a->t());
    if (!decoded)
      return g.error() << llvm::toString(decoded.takeError());
    if (decoded->numElements() != 1)
      return g.error() << "attribute 'value' must have one element";
    fill = std::move(*decoded);
  }
  ConstTensor out;
  out.dtype = fill.dtype;
  out.shape = shape;
  if (fill.isFloat())
    out.floats.assign(count, fill.floats[0]);
  else
    out.ints.assign(count, fill.ints[0]);
  g.setConstantOutput(0, std::move(out));
  return success();
}

LogicalResult importRange(GraphImporter &g) {
  if (failed(g.checkAttrs({})))
    return failure();
  const ConstTensor *args[3];
  for (size_t i = 0; i < 3; ++i) {
    auto c = g.requireConstant(i, i == 0   ? "start"
                                  : i == 1 ? "limit"
                                           : "delta");
    if (failed(c))
      return failure();
    if ((*c)->numElements() != 1)
      return g.error() << "start, limit and delta must be scalars";
    args[i] = *c;
  }
  if (args[0]->dtype != args[1]->dtype || args[0]->dtype != args[2]->dtype)
    return g.error() << "start, limit and delta must have the same type";
  double start = args[0]->floatAt(0), limit = args[1]->floatAt(0),
         delta = args[2]->floatAt(0);
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) ||
      !std::isfinite(delta))
    return g.error() << "delta must be non-zero and all values finite";
  double n = std::max(std::ceil((limit - start) / delta), 0.0);
  if (n > kMaxFoldedElements)
    return g.error() << "range of " << n << " elements is too large";
  int64_t count = static_cast<int64_t>(n);
  if (args[0]->isFloat()) {
    SmallVector<double> v;
    for (int64_t i = 0; i < count; ++i)
      v.push_back(start + i * delta);
    g.setConstantOutput(0, ConstTensor::ofFloats(v, {count}, args[0]->dtype));
  } else {
    SmallVector<int64_t> v;
    // In uint64_t: i * d may overflow int64_t where s + i * d does not.
    uint64_t s = args[0]->intAt(0), d = args[2]->intAt(0);
    for (int64_t i = 0; i < count; ++i)
      v.push_back(static_cast<int64_t>(s + static_cast<uint64_t>(i) * d));
    g.setConstantOutput(0, ConstTensor::ofInts(v, {count}, args[0]->dtype));
  }
  return success();
}

} // namespace

void gpipe::onnx_import::registerConstantImporters(OpImporterTable &t) {
  t.add("Constant", 1, importConstant);
  t.add("Shape", 1, importShape);
  t.add("ConstantOfShape", 9, importConstantOfShape);
  t.add("Range", 11, importRange);
}
