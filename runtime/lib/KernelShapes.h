// How a kernel table entry's attributes and tensors map to the loops every
// backend runs (an axis, a layer norm's rows, a cross-entropy's rows and
// classes), checked once for the CPU and the GPU backends alike.
#ifndef GPIPE_RUNTIME_KERNELSHAPES_H
#define GPIPE_RUNTIME_KERNELSHAPES_H

#include "gpipe/runtime/Bundle.h"

#include <cstdint>
#include <string>
#include <utility>

namespace gpipe::runtime {

/// The `axis` attribute of a kernel over a tensor of `rank` dimensions, in
/// [0, rank) (negative counts from the end).
inline int64_t kernelAxis(const KernelSpec &spec, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  int64_t axis = static_cast<int64_t>(spec.number("axis"));
  if (axis < 0)
    axis += r;
  if (axis < 0 || axis >= r)
    spec.fail("axis " + std::to_string(axis) + " is outside the rank");
  return axis;
}

/// A layer norm's input as [rows, normalized elements]: the axes before
/// `axis`, then the rest.
inline std::pair<int64_t, int64_t> layerNormRows(const KernelSpec &spec,
                                                 const TensorSlot &x) {
  int64_t axis = kernelAxis(spec, x.shape.size());
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < x.shape.size(); ++i)
    (static_cast<int64_t>(i) < axis ? outer : inner) *= x.shape[i];
  return {outer, inner};
}

/// A softmax cross-entropy (or its gradient): float32 [rows, classes]
/// logits, int64 [rows] labels, and the label that does not count.
struct CrossEntropyShape {
  int64_t rows = 0, classes = 0, ignoreIndex = -100;
};
inline CrossEntropyShape crossEntropyShape(const KernelSpec &spec,
                                           bool gradient) {
  const TensorSlot &logits = spec.operand("logits");
  const TensorSlot &labels = spec.operand("labels");
  const TensorSlot &out = spec.result(gradient ? "grad_logits" : "loss");
  if (logits.dtype != DType::F32 || logits.shape.size() != 2 ||
      labels.dtype != DType::I64 || labels.shape.size() != 1 ||
      labels.shape[0] != logits.shape[0] || out.dtype != DType::F32 ||
      out.numElements() != (gradient ? logits.numElements() : 1))
    spec.fail("needs float32 [N, C] logits and int64 [N] labels");
  return {logits.shape[0], logits.shape[1],
          static_cast<int64_t>(spec.number("ignore_index"))};
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_KERNELSHAPES_H
