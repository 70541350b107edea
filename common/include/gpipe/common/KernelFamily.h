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
  /// A library kernel timed by its bytes (normalizations, poolings,
  /// softmax, the loss, dropout, the optimizer's update).
  Bytes,
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

/// The family named `name`, or null.
const KernelFamily *findKernelFamily(std::string_view name);

/// Every family, in the table's order.
const KernelFamily *kernelFamiliesBegin();
const KernelFamily *kernelFamiliesEnd();

} // namespace gpipe

#endif // GPIPE_COMMON_KERNELFAMILY_H
