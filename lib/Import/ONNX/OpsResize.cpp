//===- OpsResize.cpp - Resize and Upsample --------------------------------===//
//
// Resize (opsets 10, 11, 13) and Upsample (7, 9) as ops gpipe already
// differentiates: nearest copies of each element as a reshape, a
// broadcast and a reshape; any other nearest, linear or cubic resize of
// the last two axes as products with constant interpolation matrices.
//
//===----------------------------------------------------------------------===//
#include "GraphImporter.h"
#include "OpImporterTable.h"

#include "NN/IR/NNOps.h"
#include "onnx/onnx_pb.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::onnx_import;

namespace {

/// How Resize reads its input along one axis.
struct Resampling {
  std::string mode, coordinates, rounding;
  double cubicA = -0.75;
  bool excludeOutside = false;
};

/// The input coordinate ONNX's Resize reads for output position `o` of an
/// axis of `in` elements resized by `scale` (`width`: in x scale, what the
/// coordinate transformations divide by).
double sourceCoordinate(StringRef coordinates, int64_t o, int64_t in,
                        double scale) {
  double x = static_cast<double>(o), width = static_cast<double>(in) * scale;
  if (coordinates == "half_pixel")
    return (x + 0.5) / scale - 0.5;
  if (coordinates == "pytorch_half_pixel")
    return width > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
  if (coordinates == "align_corners")
    return width > 1 ? x * static_cast<double>(in - 1) / (width - 1) : 0;
  if (coordinates == "tf_half_pixel_for_nn")
    return (x + 0.5) / scale;
  return x / scale; // asymmetric
}

/// The weights of the input elements output position `o` reads (ONNX's
/// reference: neighbours of the source coordinate, the edge repeated
/// beyond the axis).
SmallVector<std::pair<int64_t, double>> taps(const Resampling &r, int64_t o,
                                             int64_t in, double scale) {
  double x = sourceCoordinate(r.coordinates, o, in, scale);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  if (r.mode == "nearest") {
    double n;
    if (r.rounding == "floor")
      n = std::floor(x);
    else if (r.rounding == "ceil")
      n = std::ceil(x);
    else if (r.rounding == "round_prefer_ceil")
      n = std::floor(x + 0.5);
    else // round_prefer_floor
      n = std::ceil(x - 0.5);
    return {{clamp(static_cast<int64_t>(n)), 1.0}};
  }
  // The left neighbour strictly below x: the ratio is in (0, 1].
  int64_t left = static_cast<int64_t>(std::ceil(x)) - 1;
  double t = x - static_cast<double>(left);
  SmallVector<std::pair<int64_t, double>> w;
  if (r.mode == "linear") {
    w = {{left, 1 - t}, {left + 1, t}};
  } else { // cubic (Keys), a = cubic_coeff_a
    double a = r.cubicA, u = 1 - t;
    w = {
        {left - 1, ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a},
        {left, ((a + 2) * t - (a + 3)) * t * t + 1},
        {left + 1, ((a + 2) * u - (a + 3)) * u * u + 1},
        {left + 2,
         ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a}};
  }
  if (r.excludeOutside) {
    double sum = 0;
    for (auto &[i, weight] : w) {
      if (i < 0 || i >= in)
        weight = 0;
      sum += weight;
    }
    for (auto &entry : w)
      entry.second /= sum;
  }
  for (auto &entry : w)
    entry.first = clamp(entry.first);
  return w;
}

/// Input 0 resized to `out`, each element repeated a whole number of
/// times along each axis (as nearest reads it there): a reshape, a broadcast
/// and a reshape, as Tile (the gradient sums over the copies).
LogicalResult importNearestCopies(GraphImporter &g, ArrayRef<int64_t> out) {
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  ArrayRef<int64_t> in = type->getShape();
  size_t rank = in.size();
  SmallVector<int64_t> unit, expanded;
  for (size_t i = 0; i < rank; ++i) {
    int64_t copies = out[i] / in[i];
    unit.push_back(in[i]);
    expanded.push_back(in[i]);
    if (copies != 1) {
      unit.push_back(1);
      expanded.push_back(copies);
    }
  }
  auto x = g.input(0);
  if (failed(x))
    return failure();
  if (out == in) {
    g.setOutput(0, *x);
    return success();
  }
  auto result = copiesAlongUnitAxes(g, *x, unit, expanded, out);
  if (failed(result))
    return failure();
  g.setOutput(0, *result);
  return success();
}

/// Input 0 resized along the last two axes by products with constant
/// [out, in] interpolation matrices (the second-to-last axis as A x, the
/// last as x A^T): ops gpipe differentiates (the gradient is A^T g), at
/// in FLOPs per output element and axis, which a separable kernel would
/// spend 2 or 4 of. Other axes must be read unchanged.
LogicalResult importInterpolation(GraphImporter &g, const Resampling &r,
                                  ArrayRef<double> scales,
                                  ArrayRef<int64_t> out) {
  auto type = g.inputType(0);
  auto x = g.input(0);
  if (failed(type) || failed(x))
    return failure();
  ArrayRef<int64_t> in = type->getShape();
  int64_t rank = static_cast<int64_t>(in.size());
  if (!type->getElementType().isF32())
    return g.error() << "interpolates float32 tensors only";
  Value value = *x;
  for (int64_t axis = 0; axis < rank; ++axis) {
    // The matrix, unless the axis is read as it is.
    std::vector<double> matrix(out[axis] * in[axis], 0.0);
    for (int64_t o = 0; o < out[axis]; ++o)
      for (auto [i, weight] : taps(r, o, in[axis], scales[axis]))
        matrix[o * in[axis] + i] += weight;
    bool identity = out[axis] == in[axis];
    for (int64_t o = 0; identity && o < out[axis]; ++o)
      for (int64_t i = 0; identity && i < in[axis]; ++i)
        identity =
            std::abs(matrix[o * in[axis] + i] - (i == o ? 1 : 0)) < 1e-12;
    if (identity)
      continue;
    if (axis < rank - 2)
      return g.error() << "resizing axis " << axis
                       << " is not implemented yet (with mode '" << r.mode
                       << "', only the last two axes are resized)";
    if (axis == rank - 1) {
      std::vector<double> transposed(matrix.size());
      for (int64_t o = 0; o < out[axis]; ++o)
        for (int64_t i = 0; i < in[axis]; ++i)
          transposed[i * out[axis] + o] = matrix[o * in[axis] + i];
      Value a = g.materialize(
          ConstTensor::ofFloats(transposed, {in[axis], out[axis]}));
      auto product = g.createValue<nn::MatMulOp>({value, a});
      if (failed(product))
        return failure();
      value = *product;
    } else {
      Value a =
          g.materialize(ConstTensor::ofFloats(matrix, {out[axis], in[axis]}));
      auto product = g.createValue<nn::MatMulOp>({a, value});
      if (failed(product))
        return failure();
      value = *product;
    }
  }
  g.setOutput(0, value);
  return success();
}

/// Input 0 resampled as `r` reads it to `out` elements per axis (`scales`
/// what the coordinate transformation divides by): whole nearest copies of
/// each element as Tile, anything else by interpolation matrices.
LogicalResult importResampled(GraphImporter &g, const Resampling &r,
                              ArrayRef<double> scales, ArrayRef<int64_t> out) {
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  ArrayRef<int64_t> in = type->getShape();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] <= 0 || out[i] <= 0)
      return g.error() << "axis " << i << " resized from " << in[i] << " to "
                       << out[i] << " elements";
  // Whole copies of each element, as nearest reads them: no products.
  bool copies = r.mode == "nearest";
  for (size_t i = 0; i < in.size() && copies; ++i) {
    copies = out[i] % in[i] == 0;
    for (int64_t o = 0; copies && o < out[i]; ++o)
      copies = taps(r, o, in[i], scales[i])[0].first == o / (out[i] / in[i]);
  }
  if (copies)
    return importNearestCopies(g, out);
  return importInterpolation(g, r, scales, out);
}

/// Resize (opsets 10, 11 and 13): nn.Upsample and F.interpolate as PyTorch
/// exports them, and ONNX's other coordinate modes. Nearest that copies
/// each element a whole number of times along each axis (integer scale
/// factors with asymmetric + floor, half_pixel + rounding, ...) imports as
/// Tile does; any other nearest, linear or cubic resize of the last two
/// axes as interpolation matrices. tf_crop_and_resize is refused.
LogicalResult importResize(GraphImporter &g) {
  int64_t version = g.getOpset();
  if (failed(g.checkAttrs({"mode", "coordinate_transformation_mode",
                           "nearest_mode", "cubic_coeff_a", "exclude_outside",
                           "extrapolation_value"})))
    return failure();
  Resampling r;
  r.mode = g.stringAttr("mode", "nearest");
  r.coordinates = g.stringAttr("coordinate_transformation_mode",
                               version < 11 ? "asymmetric" : "half_pixel");
  r.rounding = g.stringAttr("nearest_mode",
                            version < 11 ? "floor" : "round_prefer_floor");
  r.cubicA = g.floatAttr("cubic_coeff_a", -0.75f);
  r.excludeOutside = g.intAttr("exclude_outside", 0) != 0;
  if (g.failed())
    return failure();
  if (r.mode != "nearest" && r.mode != "linear" && r.mode != "cubic")
    return g.error() << "unknown mode '" << r.mode
                     << "' (nearest, linear or cubic)";
  static constexpr llvm::StringLiteral known[] = {
      "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
      "tf_half_pixel_for_nn"};
  if (r.coordinates == "tf_crop_and_resize")
    return g.error() << "coordinate_transformation_mode 'tf_crop_and_resize' "
                        "is not implemented yet";
  if (!llvm::is_contained(known, r.coordinates))
    return g.error() << "unknown coordinate_transformation_mode '"
                     << r.coordinates << "'";
  static constexpr llvm::StringLiteral roundings[] = {
      "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (!llvm::is_contained(roundings, r.rounding))
    return g.error() << "unknown nearest_mode '" << r.rounding << "'";
  auto type = g.inputType(0);
  if (failed(type))
    return failure();
  ArrayRef<int64_t> in = type->getShape();
  size_t rank = in.size();
  // Opset 10: (X, scales); 11 and 13: (X, roi, scales, sizes).
  size_t scalesIndex = version < 11 ? 1 : 2, sizesIndex = 3;
  SmallVector<double> scales;
  SmallVector<int64_t> out;
  const ConstTensor *given = nullptr;
  if (g.hasInput(scalesIndex)) {
    auto c = g.requireConstant(scalesIndex, "the scales");
    if (failed(c))
      return failure();
    given = *c;
  }
  if (given && given->numElements() > 0) {
    if (static_cast<size_t>(given->numElements()) != rank)
      return g.error() << "scales has " << given->numElements()
                       << " entries for an input of rank " << rank;
    for (size_t i = 0; i < rank; ++i) {
      scales.push_back(given->floatAt(i));
      if (!(scales.back() > 0))
        return g.error() << "scale " << scales.back() << " of axis " << i
                         << " is not positive";
      out.push_back(static_cast<int64_t>(
          std::floor(static_cast<double>(in[i]) * scales.back())));
    }
  } else if (version >= 11 && g.hasInput(sizesIndex)) {
    auto sizes = g.requireConstant(sizesIndex, "the sizes");
    if (failed(sizes))
      return failure();
    std::vector<int64_t> s = (*sizes)->toInts();
    if (s.size() != rank)
      return g.error() << "sizes has " << s.size()
                       << " entries for an input of rank " << rank;
    for (size_t i = 0; i < rank; ++i) {
      out.push_back(s[i]);
      scales.push_back(static_cast<double>(s[i]) / static_cast<double>(in[i]));
    }
  } else {
    return g.error() << "needs scales or sizes";
  }
  return importResampled(g, r, scales, out);
}

/// The scales of Upsample: a float list attribute (opset 7) or a constant
/// input (9).
LogicalResult upsampleScales(GraphImporter &g,
                             SmallVectorImpl<double> &scales) {
  if (g.getOpset() < 9) {
    const onnx::AttributeProto *a = g.attr("scales");
    if (!a)
      return g.error() << "needs the scales attribute";
    scales.assign(a->floats().begin(), a->floats().end());
    return success();
  }
  auto c = g.requireConstant(1, "the scales");
  if (failed(c))
    return failure();
  for (int64_t i = 0; i < (*c)->numElements(); ++i)
    scales.push_back((*c)->floatAt(i));
  return success();
}

/// Upsample (opsets 7 and 9, Resize's predecessor): nearest (floor) or
/// linear with asymmetric coordinates, as Resize of opset 10 reads them.
LogicalResult importUpsample(GraphImporter &g) {
  if (failed(g.checkAttrs({"mode", "scales"})))
    return failure();
  Resampling r;
  r.mode = g.stringAttr("mode", "nearest");
  r.coordinates = "asymmetric";
  r.rounding = "floor";
  if (g.failed())
    return failure();
  if (r.mode != "nearest" && r.mode != "linear")
    return g.error() << "unknown mode '" << r.mode << "' (nearest or linear)";
  auto type = g.inputType(0);
  SmallVector<double> scales;
  if (failed(type) || failed(upsampleScales(g, scales)))
    return failure();
  ArrayRef<int64_t> in = type->getShape();
  if (scales.size() != in.size())
    return g.error() << "scales has " << scales.size()
                     << " entries for an input of rank " << in.size();
  SmallVector<int64_t> out;
  for (auto [d, scale] : llvm::zip_equal(in, scales))
    out.push_back(
        static_cast<int64_t>(std::floor(static_cast<double>(d) * scale)));
  return importResampled(g, r, scales, out);
}

} // namespace

void gpipe::onnx_import::registerResizeImporters(OpImporterTable &t) {
  t.add("Resize", 10, importResize);
  t.add("Upsample", 7, importUpsample);
}
