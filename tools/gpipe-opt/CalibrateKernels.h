//===- CalibrateKernels.h - Timing gpipe's own kernels ----------*- C++ -*-===//
//
// gpipe-opt --calibrate's kernel part: small training models (a CNN and an
// attention-like block at several sizes) are compiled for one core and for
// all the cores of this process, trained a few steps with every kernel
// timed, and each kernel family's seconds are fitted as a + b x work (FLOPs
// for matmul and conv, bytes for the others), forward and backward, per
// core count. The cost model applies the fits to the ops of the family
// (DeviceProfile::kernelSeconds).
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_TOOLS_GPIPEOPT_CALIBRATEKERNELS_H
#define GPIPE_TOOLS_GPIPEOPT_CALIBRATEKERNELS_H

#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <array>

namespace gpipe {

/// The profile's "kernels" array; progress on `log`. `privateCacheMiB`:
/// each core's own cache (level 2), where generated loops run fastest.
/// The machine's pace (runtime::cpuSgemmGflops) is probed before and
/// after each model's timed steps (the faster kept) and every time is
/// scaled to the median pace, which with the slowest and fastest is
/// returned in `paceRange` (GFLOP/s). `bf16`: the models with products are
/// timed again in bfloat16 where the CPU multiplies in bfloat16 (the
/// "_bf16" families).
llvm::Expected<llvm::json::Array>
calibrateKernels(mlir::DialectRegistry &registry, double privateCacheMiB,
                 llvm::raw_ostream &log, bool bf16 = true,
                 std::array<double, 3> *paceRange = nullptr);

} // namespace gpipe

#endif // GPIPE_TOOLS_GPIPEOPT_CALIBRATEKERNELS_H
