// The kernel families the cost model prices: each op's CostOpInterface
// names one, `gpipe-opt --calibrate` fits each from the kernels it times,
// and the cost model reads a fit by it. What a family's fit measures
// (FLOPs and bytes, bytes alone, a generated loop's bytes forward and
// backward), whether it loops over feature maps or matrices or converts its
// parameters once a step, and which family prices it in a profile
// calibrated before it had its own, is written here once for the
// compiler, the calibrator and the tests.
#ifndef GPIPE_COMMON_KERNELFAMILY_H
#define GPIPE_COMMON_KERNELFAMILY_H

#include <cstddef>
#include <string_view>

namespace gpipe {

/// What a family's fit is a function of.
enum class KernelTiming {
  /// A library kernel timed by its FLOPs and bytes (matmuls, convolutions,
  /// attention).
  Flops,
  /// A library kernel timed by its bytes (normalizations, softmax, the
  /// loss, dropout, the optimizer's update).
  Bytes,
  /// A library kernel timed by its window's taps (the result's elements
  /// times the window's, the op's getFlops) and its bytes: poolings, whose
  /// 2x2 windows at stride 1 read each input four times, at stride 2 once,
  /// and a 3x3 window at stride 2 2.25 times (priced by their bytes, a
  /// ResNet's 3x3 max pooling took 2.3-2.6x its price fitted on 2x2 ones,
  /// a 2x2 average pooling at stride 2 0.45x its price fitted at stride 1).
  Taps,
  /// A loop the compiler generates, timed by its bytes forward and
  /// backward in one fit.
  Loop,
};

/// What a family's fit prices a loop over, besides its work and bytes:
/// the result's planes.
enum class KernelPlanes {
  None,
  /// A loop a feature map (convolutions, batch norm of large maps,
  /// poolings): the result's elements over those of its maps (the last
  /// two dimensions of a rank-4 or rank-5 result; of a lower rank, the
  /// last).
  FeatureMaps,
  /// A product a matrix of a stack (attention's unfused products, one
  /// library call over every head): the result's matrices, its elements
  /// over those of its last two dimensions.
  Matrices,
};

struct KernelFamily {
  std::string_view name;
  KernelTiming timing;
  KernelPlanes planes;
  /// Converts its parameters to a layout of its own once a step, the other
  /// micro-batches reusing it (the CPU's convolutions).
  bool convertsParameters;
  /// The family whose fit prices this one in a profile without its own
  /// (one calibrated before it existed); empty for none. A generated loop
  /// without a fit of its own is priced as "elementwise" by the cost model.
  std::string_view nearest;
};

/// What the work of a fit of `timing` counts, as a profile's fits say it
/// ("work": "flops", "bytes" or "taps"; a generated loop's, "bytes").
std::string_view workUnit(KernelTiming timing);

/// The family named `name`, or null.
const KernelFamily *findKernelFamily(std::string_view name);

/// Every family, in the table's order.
const KernelFamily *kernelFamiliesBegin();
const KernelFamily *kernelFamiliesEnd();

} // namespace gpipe

#endif // GPIPE_COMMON_KERNELFAMILY_H
