//===- Windowing.cpp - Sliding-window attributes of ONNX ops --------------===//
#include "Windowing.h"

#include "onnx/onnx_pb.h"

using namespace mlir;
using namespace gpipe::onnx_import;

FailureOr<Window> gpipe::onnx_import::readWindowAttrs(
    GraphImporter &g, size_t spatial,
    std::optional<ArrayRef<int64_t>> kernelFromWeight) {
  Window w;
  auto kernelAttr = g.intsAttr("kernel_shape");
  if (kernelFromWeight) {
    w.kernel.assign(kernelFromWeight->begin(), kernelFromWeight->end());
    if (kernelAttr && ArrayRef<int64_t>(*kernelAttr) != *kernelFromWeight)
      return g.error() << "kernel_shape does not match the weight's spatial "
                          "shape";
  } else {
    if (!kernelAttr)
      return g.error() << "attribute 'kernel_shape' is required";
    w.kernel = *kernelAttr;
  }
  auto readOr = [&](StringRef name, size_t size,
                    int64_t dflt) -> FailureOr<SmallVector<int64_t>> {
    auto values = g.intsAttr(name);
    if (!values || values->empty())
      return SmallVector<int64_t>(size, dflt);
    if (values->size() != size)
      return g.error() << "attribute '" << name << "' must have " << size
                       << " entries, got " << values->size();
    return *values;
  };
  auto strides = readOr("strides", spatial, 1);
  auto dilations = readOr("dilations", spatial, 1);
  auto pads = readOr("pads", 2 * spatial, 0);
  if (failed(strides) || failed(dilations) || failed(pads) || g.failed())
    return failure();
  if (w.kernel.size() != spatial)
    return g.error() << "kernel has " << w.kernel.size()
                     << " axes but the input has " << spatial
                     << " spatial axes";
  w.strides = *strides;
  w.dilations = *dilations;
  w.pads = *pads;
  for (size_t i = 0; i < spatial; ++i)
    if (w.kernel[i] <= 0 || w.strides[i] <= 0 || w.dilations[i] <= 0)
      return g.error() << "kernel_shape, strides and dilations must be "
                          "positive";
  w.autoPad = g.stringAttr("auto_pad", "NOTSET");
  if (w.autoPad != "NOTSET" && w.autoPad != "VALID" &&
      w.autoPad != "SAME_UPPER" && w.autoPad != "SAME_LOWER")
    return g.error() << "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or "
                        "VALID, got '"
                     << w.autoPad << "'";
  return w;
}

FailureOr<Window> gpipe::onnx_import::readWindow(
    GraphImporter &g, RankedTensorType input,
    std::optional<ArrayRef<int64_t>> kernelFromWeight) {
  if (input.getRank() < 3)
    return g.error() << "input must have rank >= 3 (N, C, spatial...), got "
                     << input;
  size_t spatial = input.getRank() - 2;
  FailureOr<Window> read = readWindowAttrs(g, spatial, kernelFromWeight);
  if (failed(read))
    return failure();
  Window w = std::move(*read);
  const std::string &autoPad = w.autoPad;
  if (autoPad == "VALID") {
    w.pads.assign(2 * spatial, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < spatial; ++i) {
      int64_t in = input.getDimSize(i + 2);
      int64_t out = (in + w.strides[i] - 1) / w.strides[i];
      int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t total =
          std::max<int64_t>(0, (out - 1) * w.strides[i] + extent - in);
      int64_t small = total / 2, large = total - small;
      bool upper = autoPad == "SAME_UPPER";
      w.pads[i] = upper ? small : large;
      w.pads[i + spatial] = upper ? large : small;
    }
  }
  return w;
}
