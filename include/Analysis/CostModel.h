//===- CostModel.h - Devices, device profiles and op times ------*- C++ -*-===//
//
// The partitioner's view of the hardware: a device list (cpu:N, cpu:A-B,
// cuda:N), a profile per device (peak FLOP/s, memory bandwidth and
// capacity, link bandwidth) and the time of one op on a device, from a
// roofline over the op's FLOPs and bytes (CostOpInterface) or from a table
// of measured times.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_COSTMODEL_H
#define GPIPE_ANALYSIS_COSTMODEL_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include "gpipe/common/DeviceList.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace gpipe {

/// Parses "cpu:0,cpu:1-3,cuda:0" (the contract's grammar, devices may
/// repeat). On error returns a message naming the offending item.
llvm::Expected<std::vector<Device>> parseDevices(llvm::StringRef text);

/// The runtime's hand-offs between stage threads, seconds (gpipe-opt
/// --calibrate, runtime::measureThreadHandoff; 0: not measured, no time):
/// a device turn passed between two threads on one core, a message waking
/// a receiver that had blocked, and how long a receiver spins before it
/// blocks. The schedule simulator's use: StageTimes::handoffs.
struct ThreadHandoffs {
  double turn = 0, wake = 0, spin = 0;
  bool measured() const { return turn > 0 || wake > 0 || spin > 0; }
};

/// What the cost model knows of a device. Rates are per second.
struct DeviceProfile {
  std::string name;           // the device it describes ("cpu", "cuda")
  double peakFlops = 0;       // FLOP/s of the whole device
  double memoryBandwidth = 0; // bytes/s
  /// Bytes a stage's memory plan may take on the device (what
  /// setDeviceMemory leaves of the device's memory).
  double memoryCapacity = 0;
  /// Bytes of the device's memory kept for the process around the plan
  /// (setDeviceMemory); 0 for a profile's own capacity.
  double runtimeReserve = 0;
  double linkBandwidth = 0; // bytes/s to a neighbouring stage
  /// Bytes of cache of the device's cores (0: not measured), and the
  /// rate of a pass over data that fits in them: see passBandwidth.
  double cacheBytes = 0;
  /// Bytes of the cores' own (level 2) caches, of cacheBytes (0: not
  /// measured): generated loops whose bytes fit run at its rate.
  double privateCacheBytes = 0;
  /// The rate of the runtime's copies beyond the caches (gpipe-opt
  /// --calibrate's stash ring over 64 MiB; 0: not measured, the memory
  /// bandwidth serves), bytes/s.
  double copyMemoryBandwidth = 0;
  /// The cache a stash slot can stay in from its write to its read a
  /// whole step of the stage's traffic later: the cores' own (level 2),
  /// else cacheBytes.
  double stashCache() const {
    return privateCacheBytes > 0 ? privateCacheBytes : cacheBytes;
  }
  double copyBandwidth() const {
    return copyMemoryBandwidth > 0 ? copyMemoryBandwidth : memoryBandwidth;
  }
  /// The last cache level as a pass over memory meets it (gpipe-opt
  /// --calibrate's sweep of a generated loop's pass over growing
  /// footprints; 0: not measured): the bytes of it the device's cores
  /// hold, the rate of a pass that fits in it and of one far beyond it.
  double lastLevelShareBytes = 0;
  double lastLevelBandwidth = 0, beyondLastLevelBandwidth = 0;
  /// Seconds a stage's ops moving `bytes` a micro-batch spend beyond what
  /// the kernel and loop fits price, when a micro-batch's pass over the
  /// stage touches `footprint` bytes (its parameters and every result):
  /// the fits were measured with operands in the caches, but a pass over
  /// more than the last level holds writes and reads memory it last
  /// touched a pass before. Of a cyclic pass over F bytes a cache of C
  /// keeps about C / F, so 1 - C/F of the bytes pay the memory's rate over
  /// the last level's (against the sweep that measures C, this law is
  /// within 10% of its rates from 4x C on and 24% slow at 2x C); 0 when
  /// not measured or within.
  double beyondLastLevelSeconds(double bytes, double footprint) const;
  /// The runtime's gradient sum on one core as gpipe-opt --calibrate
  /// measures it (runtime::cpuGradientSumBandwidth): {working set, rate}
  /// pairs in bytes and bytes/s, working sets increasing, from within a
  /// core's own cache to beyond it; empty: not measured. And the bytes each
  /// thread of the runtime's sums takes at least (its parallel grain).
  std::vector<std::pair<double, double>> gradientSumRates;
  double parallelGrainBytes = 0;
  /// The rate of one thread of the runtime's gradient sum (bytes/s, a
  /// copy counting two passes, an addition three) when the device's cores
  /// hold `workingSet` bytes in all: the rate measured where a core holds
  /// workingSet / cores, interpolated between working sets in their
  /// logarithm (the smallest's rate below them), the largest's beyond it
  /// where that one was past twice a core's cache; none without a
  /// measurement or beyond a largest working set within the caches (the
  /// copies' pass rate then applies).
  std::optional<double> gradientSumRate(double workingSet) const;
  /// The threads the runtime sums a tensor of `bytes` on: min(cores,
  /// bytes / grain), at least one.
  double gradientSumThreads(double bytes) const;
  /// Between MPI ranks (stage messages and data-parallel all-reduces):
  /// bytes/s and seconds per message.
  double networkBandwidth = 0;
  double networkLatency = 0;
  /// The data-parallel sum as measured (gpipe-opt --calibrate under
  /// mpirun): bytes/s and seconds per step of a ring; 0 when not measured
  /// (the network figures then apply).
  double allReduceBandwidth = 0;
  double allReduceLatency = 0;
  ThreadHandoffs handoffs;
  /// A GPU kernel's least seconds: what queueing one launch costs (the host
  /// launches every generated and library kernel; the GPU cannot run them
  /// faster than they come), gpipe-run --calibrate=cuda:N's launch_us; 0 on
  /// a CPU.
  double launchSeconds = 0;
  std::string source; // "built-in" or the file it came from
  /// A CPU device's cores, and what the calibrated host reaches with every
  /// core busy (0: not measured): see shareHost.
  int64_t cores = 1;
  int64_t hostCores = 0;
  double hostPeakFlops = 0, hostMemoryBandwidth = 0;
  /// A kernel family's measured seconds on `cores` cores: per run a + b x
  /// work + c x bytes of activations + d x bytes of parameters + e x bytes
  /// of activations and f x bytes of parameters beyond the cores' own
  /// caches (privateCacheBytes) + g x planes of the result (see
  /// kernelFeatures), and per step h x bytes of parameters the step's
  /// first run converts to the kernel's own layout (a CPU convolution's
  /// weights, reused by the other micro-batches), forward and (when
  /// measured) backward (gpipe-opt --calibrate; a profile's three-number
  /// fits price parameters' bytes as the others, d = c; shorter fits leave
  /// the rest 0).
  struct KernelFit {
    /// a to h.
    using Coefficients = std::array<double, 8>;
    std::string family;
    int64_t cores = 1;
    Coefficients forward{};
    std::optional<Coefficients> backward;
  };
  std::vector<KernelFit> kernels;
  /// The families whose fits the profile held in another unit of work than
  /// this compiler's (its "work", KernelFamily's workUnit; a profile
  /// calibrated before poolings were timed by their taps): left out, the
  /// families priced as a profile without them (the compiler warns).
  std::vector<std::string> outdatedFits;

  /// Seconds of a kernel of `family` doing `work` (FLOPs for matmul and
  /// conv, taps for poolings, bytes for the others) and moving `bytes` on this
  /// device, of which `parameterBytes` are the parameters' and constants' it
  /// reads, from the fit measured on the nearest number of cores (scaled to
  /// this device's cores); none when the profile has no fit for the family.
  std::optional<double> kernelSeconds(llvm::StringRef family, double work,
                                      double bytes, bool backward,
                                      double parameterBytes = 0,
                                      double planes = 0) const;
  /// Seconds a step's first forward (`backward`) kernel of `family`
  /// spends converting `parameterBytes` of parameters to its own layout
  /// (the fit's g, of the same fit as kernelSeconds); 0 without one.
  double conversionSeconds(llvm::StringRef family, double parameterBytes,
                           bool backward) const;

  /// Seconds of a generated loop of `family` ("elementwise", "copy", "gelu")
  /// moving `bytes`, of a forward or a `backward`: the family's fit (else
  /// "elementwise"'s; the forward's where the backward has none), a + b x
  /// bytes + c x the bytes beyond the cores' own caches
  /// (privateCacheBytes), and at least the bytes beyond the whole cache at
  /// the memory bandwidth; none without a fit.
  std::optional<double> loopSeconds(llvm::StringRef family, double bytes,
                                    bool backward = false) const;
};

/// The per-run regressors of a kernel fit (DeviceProfile::KernelFit), as
/// gpipe-opt --calibrate fits them and kernelSeconds applies them: 1, the
/// work, the bytes of activations and of parameters (`parameterBytes` of
/// `bytes`), of each the bytes beyond `privateCacheBytes` (0: not
/// measured), and the result's `planes` (its elements over those of its
/// innermost dimensions: a kernel over many small maps, MobileNet's 2x2
/// ones, pays per map).
std::array<double, 7> kernelFeatures(double work, double bytes,
                                     double parameterBytes, double planes,
                                     double privateCacheBytes);

/// Bytes/s of a pass over `workingSet` bytes: `cachedBandwidth` (at least
/// `memoryBandwidth`) when it fits in `cacheBytes`, else the share of it
/// the cache holds at that rate and the rest at `memoryBandwidth` (no
/// cliff where a stage's footprint crosses the cache's size: a two-stage
/// GPT on two ranks, each stage's plan 2.3 MB over a level 2 of 2 MiB, had
/// its 0.6 MB of copies a micro-batch priced at the memory's 13 GB/s,
/// measured at 31, and the plan search, whose estimate of the footprint
/// fell under the cache, predicted 2.29 ms where the compiled plan said
/// 2.65); `memoryBandwidth` when the cache is not measured (0).
double passBandwidth(double workingSet, double cacheBytes,
                     double cachedBandwidth, double memoryBandwidth);

/// The devices of a plan run at once and share their host: with
/// `busyCores` cores busy in all, a device's sgemm rate and memory
/// bandwidth are its cores' share of what that many cores reach together,
/// min(busy x one core's, the whole host's measured figure), at most its
/// cores times one core's. Profiles without host figures are left as they
/// are.
void shareHost(llvm::MutableArrayRef<DeviceProfile> profiles,
               int64_t busyCores);

/// Stages listed on the same device (`keys`: each stage's device with its
/// rank, "r1:cpu:0") take turns on it and share its caches: for each of
/// the c stages on a device they hold 1/c of what they hold for a stage
/// alone (measured: the deep MLP's four stages over two cores, two per
/// core, priced as if each had the caches to itself, were predicted at
/// 0.77x of their measured step, 1.01x with the caches shared). Their
/// memory is the schedule verifier's to check, all of them together.
void shareDevice(llvm::MutableArrayRef<DeviceProfile> profiles,
                 llvm::ArrayRef<std::string> keys);

/// What a process holds beside its stages' memory plan, kept from a
/// device of `bytes`: 64 MiB for the runtime's code and libraries before
/// it loads a bundle (12 to 21 MiB measured), the kernels' buffers
/// (parameters in oneDNN's layouts, the kernels' workspace: up to 21 MiB)
/// and the rest (threads' stacks, libraries' code and caches: up to 27
/// MiB), plus 1/32 of the device for the part of the rest that grows with
/// the model (GPT-2-small: 47 MiB beside a plan of 2.6 GiB);
/// docs/memory.md.
double runtimeReserveBytes(int64_t bytes);

/// Gives `profile` a device of `bytes` (--memory-per-device): the stage's
/// plan may take what is left after runtimeReserveBytes.
void setDeviceMemory(DeviceProfile &profile, int64_t bytes);

/// "512MiB", "4GiB", "1.5G", "800M", "123456" (bytes): a memory size for
/// --memory-per-device (K, M, G, T: powers of 1024, with or without "iB"
/// or "B"); none for anything else.
std::optional<int64_t> parseMemorySize(llvm::StringRef text);

/// The built-in profile of `device`: per-core figures times its cores for
/// a CPU (docs/pipeline.md gives the numbers).
DeviceProfile defaultProfile(const Device &device);

/// Reads a JSON profile written by gpipe-opt --calibrate:
/// {"peak_gflops_per_core":..., "memory_gbps_per_core":...,
///  "memory_gib":..., "link_gbps":...[, "network_gbps":...,
///  "network_latency_us":..., "allreduce_gbps":...,
///  "allreduce_latency_us":...]}; returns the profile of `device`.
llvm::Expected<DeviceProfile> readProfile(llvm::StringRef path,
                                          const Device &device);

/// The profile of `device` from a comma-separated list of profile files
/// (--device-profile): the one whose "device" is the device's kind ("cpu"
/// when missing; "cuda" for a GPU profile written by gpipe-run
/// --calibrate=cuda:N, whose figures are the whole device's:
/// peak_gflops, memory_gbps, memory_gib, link_gbps); the built-in profile
/// when none is.
llvm::Expected<DeviceProfile> profileFor(llvm::StringRef profiles,
                                         const Device &device);

/// Writes a CPU profile in the format readProfile reads.
/// The network figures are left out when not positive (the built-in
/// ones then apply).
struct NetworkFigures {
  double gbps = 0, latencyUs = 0;                   // ping-pong
  double allReduceGbps = 0, allReduceLatencyUs = 0; // the reducer's sums
};
/// The whole host with every core busy (0: not measured; the per-core
/// figures times the cores then apply): cores, sgemm GFLOP/s on all of
/// them, and the memory bandwidth all of them share.
struct HostFigures {
  int64_t cores = 0;
  double gflops = 0, gbps = 0;
  /// Each core's cache (its own levels and its share of those it shares),
  /// and of it the core's own level 2.
  double cacheMiBPerCore = 0, privateCacheMiBPerCore = 0;
  /// The runtime's copies on one core beyond the caches (a stash ring of
  /// 64 MiB), GB/s; 0: not measured.
  double copyGbpsPerCore = 0;
  /// One core's share of the last cache level as its passes over memory
  /// meet it (MiB), and their rate within it and far beyond it (GB/s);
  /// 0: not measured (DeviceProfile::beyondLastLevelSeconds).
  double lastLevelMiBPerCore = 0, lastLevelGbpsPerCore = 0,
         beyondLastLevelGbpsPerCore = 0;
  /// The runtime's gradient sum on one core: {working set MiB, GB/s}
  /// (DeviceProfile::gradientSumRates), and its threads' grain in bytes;
  /// empty and 0: not measured.
  std::vector<std::pair<double, double>> gradientSumRates;
  int64_t parallelGrainBytes = 0;
  /// The runtime's hand-offs between stage threads (not measured: none).
  ThreadHandoffs handoffs;
};
std::string profileJSON(double gflopsPerCore, double gbpsPerCore,
                        double memoryGiB, double linkGbps,
                        const NetworkFigures &network = {},
                        const HostFigures &host = {},
                        llvm::json::Array kernels = {});

/// Seconds of a sum of `bytes` over `replicas` ranks on `profile`'s network
/// (a ring: 2 (D-1) steps of a latency and bytes / D), with the measured
/// all-reduce figures when the profile has them, else the ping-pong's.
double allReduceTime(double bytes, int64_t replicas,
                     const DeviceProfile &profile);

/// Measured seconds per micro-batch of each op's forward and backward
/// kernels, keyed by the op's name (its NameLoc, the ONNX node name), as
/// gpipe-run --profile-ops writes them: a header line, then one
/// "name,forward_seconds,backward_seconds,micro_batch_rows" row per op
/// (the last two columns may be missing). Seconds measured on micro-batches
/// of another number of rows than `rows` (the micro-batch being compiled;
/// 0: unknown) are scaled to it linearly.
struct OpCost {
  double forward = 0;
  std::optional<double> backward;
};
using CostTable = llvm::StringMap<OpCost>;
llvm::Expected<CostTable> readCostTable(llvm::StringRef path, int64_t rows = 0);

/// The name that a cost table uses for `op` ("" if it has none).
std::string costTableKey(mlir::Operation *op);
/// The same for an op at `loc`: the first name in it.
std::string costTableKey(mlir::Location loc);

/// max(flops / peak, bytes / bandwidth, a kernel launch) on `profile`.
double rooflineSeconds(double flops, double bytes,
                       const DeviceProfile &profile);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_COSTMODEL_H
