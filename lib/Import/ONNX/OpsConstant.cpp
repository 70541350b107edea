//===- OpsConstant.cpp - Importers of compile-time values -----------------===//
//
// Constant, Shape, ConstantOfShape and Range produce values known at compile
// time; they never become ops unless a compute op consumes them.
//
//===----------------------------------------------------------------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
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

/// ScatterND on constants (the attention mask of Swin's shifted windows,
/// built by slice assignments on a tensor of zeros): data with each index
/// tuple's slice replaced (reduction "none") or combined ("add", "mul",
/// "max", "min") with its updates. Inputs computed at run time are an
/// error: gpipe has no scatter kernel yet.
LogicalResult importScatterND(GraphImporter &g) {
  if (failed(g.checkAttrs({"reduction"})))
    return failure();
  std::string reduction = g.stringAttr("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" &&
      reduction != "max" && reduction != "min")
    return g.error() << "reduction '" << reduction
                     << "' is not one of none, add, mul, max, min";
  // Folded at compile time: gpipe has no scatter kernel.
  const ConstTensor *in[3];
  const char *what[3] = {"ScatterND's data (folded: no scatter kernel yet)",
                         "ScatterND's indices", "ScatterND's updates"};
  for (size_t i = 0; i < 3; ++i) {
    auto c = g.requireConstant(i, what[i]);
    if (failed(c))
      return failure();
    in[i] = *c;
  }
  const ConstTensor *data = in[0], *indices = in[1], *updates = in[2];
  if (indices->isFloat() || indices->shape.empty())
    return g.error() << "indices must be an integer tensor of rank >= 1";
  if (updates->dtype != data->dtype)
    return g.error() << "updates must have the data's element type";
  int64_t rank = static_cast<int64_t>(data->shape.size());
  int64_t k = indices->shape.back();
  if (k < 1 || k > rank)
    return g.error() << "index tuples of " << k
                     << " entries do not address data of rank " << rank;
  // updates: indices.shape[:-1] + data.shape[k:].
  SmallVector<int64_t> want(indices->shape.begin(), indices->shape.end() - 1);
  want.append(data->shape.begin() + k, data->shape.end());
  if (SmallVector<int64_t>(updates->shape) != want)
    return g.error() << "updates have the wrong shape for these indices";
  int64_t slice = 1;
  for (int64_t d = k; d < rank; ++d)
    slice *= data->shape[d];
  int64_t tuples = indices->numElements() / k;
  ConstTensor out = *data;
  std::vector<int64_t> idx = indices->toInts();
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t i = idx[t * k + d], n = data->shape[d];
      if (i < -n || i >= n)
        return g.error() << "index " << i << " is out of range for dimension "
                         << d << " of size " << n;
      offset = offset * n + (i < 0 ? i + n : i);
    }
    offset *= slice;
    for (int64_t e = 0; e < slice; ++e) {
      size_t to = static_cast<size_t>(offset + e),
             from = static_cast<size_t>(t * slice + e);
      auto combine = [&](auto &dst, auto value) {
        if (reduction == "add")
          dst[to] += value;
        else if (reduction == "mul")
          dst[to] *= value;
        else if (reduction == "max")
          dst[to] = std::max(dst[to], value);
        else if (reduction == "min")
          dst[to] = std::min(dst[to], value);
        else
          dst[to] = value;
      };
      if (out.isFloat())
        combine(out.floats, updates->floats[from]);
      else
        combine(out.ints, updates->ints[from]);
    }
  }
  g.setConstantOutput(0, std::move(out));
  return success();
}

} // namespace

void gpipe::onnx_import::registerConstantImporters(OpImporterTable &t) {
  t.add("Constant", 1, importConstant);
  t.add("Shape", 1, importShape);
  t.add("ConstantOfShape", 9, importConstantOfShape);
  t.add("Range", 11, importRange);
  t.add("ScatterND", 11, importScatterND);
}
