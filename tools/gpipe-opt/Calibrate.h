//===- Calibrate.h - Measuring this machine's cores -------------*- C++ -*-===//
#ifndef GPIPE_TOOLS_CALIBRATE_H
#define GPIPE_TOOLS_CALIBRATE_H

#include "mlir/IR/DialectRegistry.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace gpipe {

/// Measures one core: oneDNN sgemm FLOP/s, memory copy bandwidth, a
/// cache-sized copy (the transfer between two stages on this host) and the
/// physical memory; logs the figures and returns the JSON profile that
/// --device-profile reads.
/// Under mpirun (two ranks or more) rank 0 also measures the network to
/// each other rank with an MPI ping-pong (latency of small messages,
/// bandwidth of 4 MiB ones; the slowest peer counts) and writes
/// network_gbps and network_latency_us; the other ranks only answer.
/// Returns an empty profile on those ranks. With several cores it also
/// measures the whole host (every core busy) and times gpipe's own kernels
/// on one core and on all of them (CalibrateKernels.h). Throws
/// std::runtime_error when the kernels cannot be timed. `bf16`: the
/// bfloat16 products are timed too (where the CPU multiplies in bfloat16).
std::string calibrateCpu(mlir::DialectRegistry &registry,
                         llvm::raw_ostream &log, bool bf16 = true);

/// The cores this process may run on, in order.
std::vector<int> affinityCores();

/// The median of `values` (not empty; the mean of the middle two for an
/// even count): what calibration keeps of repeated timings.
double median(std::vector<double> values);

/// "oneDNN 2.6.3": the library --calibrate times sgemm with.
std::string onednnVersion();

} // namespace gpipe

#endif // GPIPE_TOOLS_CALIBRATE_H
