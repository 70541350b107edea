// What this runtime build can run on.
#ifndef GPIPE_RUNTIME_RUNTIMEINFO_H
#define GPIPE_RUNTIME_RUNTIMEINFO_H

#include "gpipe/common/DeviceList.h"

#include <iosfwd>
#include <string>

namespace gpipe::runtime {

/// oneDNN version, e.g. "2.6.3".
std::string onednnVersion();

/// Number of CUDA devices visible; 0 when there are none or CUDA support
/// is not built (then `reason` says why).
int cudaDeviceCount(std::string *reason = nullptr);

/// "CUDA runtime 13.0 (driver 12.8)", or why there is no CUDA.
std::string cudaVersion();

/// The MPI library's first version line ("Open MPI v4.1.4, ..."), or
/// "not built" when the runtime was built without MPI.
std::string mpiVersion();

/// Why `device` is not on this host ("this host has 2 cores", CUDA's
/// reason), or "" when it is. (A process's CPU set is not checked: mpirun
/// binds each rank to its own cores, and a stage thread pins itself to
/// the bundle's cores whatever its process was bound to.)
std::string deviceMissing(const Device &device);

/// Measures GPU `ordinal` (cuBLAS float32 sgemm without TF32, device
/// memory copies, pinned host-to-GPU copies, memory size) and returns a
/// GPU profile for gpipe-opt --device-profile:
/// {"device": "cuda", "peak_gflops", "memory_gbps", "memory_gib",
/// "link_gbps"}; progress lines go to `log`. Throws std::runtime_error
/// when the GPU cannot be used or CUDA support is not built.
std::string calibrateGpu(int ordinal, std::ostream &log);

/// One core's float32 sgemm rate now, in GFLOP/s: oneDNN on one OpenMP
/// thread of the calling thread, a 1024^3 product, the median of 5, as
/// gpipe-opt --calibrate measures a profile's peak_gflops_per_core (about
/// 0.15 s). How fast this machine runs at the moment, beside the profile.
double cpuSgemmGflops();

/// Whether this CPU runs the products of --precision=bf16 (oneDNN's
/// bfloat16 kernels: AVX-512, the bfloat16 instructions or AMX where the
/// core has them).
bool cpuMultipliesBf16();

/// The rate of the runtime's gradient sum (a micro-batch's gradients added
/// where the optimizer reads them, acc += x over floats, as the CPU backend
/// runs it) on one thread when acc and x are `workingSetBytes` together,
/// bytes/s counting two reads and a write an element: the median of 7
/// timings of enough passes to take about 2 ms each.
double cpuGradientSumBandwidth(size_t workingSetBytes);

/// What passing work between the stages' threads costs, as the runtime
/// passes it (gpipe-opt --calibrate's figures for the schedule simulator):
/// `turnSeconds`, the median of one device turn passed from a thread to
/// another pinned to the same core (runtime/lib/DeviceTurn.h: stages that
/// share a core); `wakeSeconds`, the median from a send on `core` to its
/// receive's return on `otherCore` where the receiver had waited past its
/// spin and blocked (runtime/lib/Channel.h); `spinSeconds`, how long a
/// receiver spins before it blocks (a message that comes sooner reaches a
/// spinning thread at once). About 0.3 s.
struct ThreadHandoff {
  double turnSeconds = 0, wakeSeconds = 0, spinSeconds = 0;
};
ThreadHandoff measureThreadHandoff(int core, int otherCore);

/// Bytes of a tensor the runtime's copies and gradient sums give each
/// thread at least (a tensor of fewer than twice this runs on one thread).
int64_t parallelGrainBytes();

/// A multi-line description for `gpipe-run --version` (`probeGpus` false:
/// the CUDA backend described, not loaded) and `--list-devices` (true: the
/// backend loaded and the GPUs counted).
std::string runtimeInfo(bool probeGpus);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_RUNTIMEINFO_H
