//===- Calibrate.cpp - Measuring this machine's cores ---------------------===//
#include "Calibrate.h"
#include "CalibrateKernels.h"

#include "gpipe/runtime/ProcessGroup.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include "Analysis/CostModel.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

/// Median seconds of `repeats` runs of `fn` after one warm-up run.
template <typename Fn> double medianSeconds(int repeats, Fn fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return gpipe::median(std::move(times));
}

double copyBandwidth(size_t bytes, int repeats) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double t = medianSeconds(repeats, [&] {
    std::memcpy(b.data(), a.data(), bytes);
    a[0] = b[bytes - 1];
  });
  return 2.0 * static_cast<double>(bytes) / t; // read + write
}

/// The runtime's copies as it makes them (a micro-batch's stash copied
/// into one slot of a ring of four and later back out): bytes/s when the
/// ring, the source and the destination are `workingSet` bytes in all.
double ringCopyBandwidth(size_t workingSet, int repeats) {
  size_t part = workingSet / 6;
  std::vector<std::vector<char>> slots(4, std::vector<char>(part, 1));
  std::vector<char> from(part, 2), to(part, 3);
  double t = medianSeconds(repeats, [&] {
    for (std::vector<char> &slot : slots) {
      std::memcpy(slot.data(), from.data(), part);
      ++from[0];
    }
    for (std::vector<char> &slot : slots)
      std::memcpy(to.data(), slot.data(), part);
  });
  return 2.0 * 2.0 * 4.0 * static_cast<double>(part) / t; // read + write
}

/// The rate of the runtime's copies beyond the caches: a stash ring of 64
/// MiB, GB/s. A stash slot is read back a step of the stage's traffic after
/// its write, so beyond the cores' own cache its copies run at this rate,
/// not at the 256 MiB memcpy's (glibc streams stores past the cache at that
/// size: 19.7 GB/s here against 11.6 for the ring).
double measureCopies(llvm::raw_ostream &log) {
  double gbps = ringCopyBandwidth(size_t(64) << 20, 7) / 1e9;
  log << llvm::format("calibrate: one core: the runtime's copies beyond the "
                      "caches (a 64 MiB stash ring) %.1f GB/s\n",
                      gbps);
  return gbps;
}

/// One core's passes over memory as a generated loop makes them (b = a + 1
/// over floats, a and b together the pass's footprint), from twice the
/// core's level 2 to 512 MiB: where a pass stops fitting the last cache
/// level this core gets (on a VM, its share of the host's: this machine's
/// sysfs said 260 MiB, its passes ran at 28 GB/s up to about 32 MiB, 15
/// at 128 and 13 from 256 MiB on), the rate within it and the rate far beyond
/// (gpipe::DeviceProfile::beyondLastLevelSeconds). A pass over F bytes
/// keeps about C / F of them in a cache of C, so each footprint between
/// the two rates r says C = F (1/r - 1/beyond) / (1/within - 1/beyond):
/// the median of those. No distinct level (within less than 1.25x
/// beyond): none.
void measureLastLevel(double l2MiB, gpipe::HostFigures &host,
                      llvm::raw_ostream &log) {
  constexpr size_t kLargest = size_t(256) << 20; // each of a and b
  size_t first =
      std::max<size_t>(size_t(1) << 20, static_cast<size_t>(l2MiB * (1 << 20)));
  std::vector<float> a(kLargest / sizeof(float), 1.0f),
      b(kLargest / sizeof(float), 2.0f);
  std::vector<std::pair<double, double>> points; // footprint, bytes/s
  // Footprints sqrt(2) apart: the transition between the two rates spans
  // about two octaves here, and doubling steps left two footprints in it
  // (two calibrations put the share at 31 and 45 MiB).
  for (int k = 0;; ++k) {
    size_t half = static_cast<size_t>(static_cast<double>(first) *
                                      std::pow(2.0, k / 2.0)) &
                  ~size_t(63);
    if (half > kLargest)
      break;
    size_t n = half / sizeof(float);
    int passes = static_cast<int>(std::max<size_t>(1, kLargest / half));
    double t = medianSeconds(3, [&] {
      for (int p = 0; p < passes; ++p) {
        float *to = b.data();
        const float *from = a.data();
        for (size_t i = 0; i < n; ++i)
          to[i] = from[i] + 1.0f;
        a[static_cast<size_t>(p) % n] = b[n - 1];
      }
    });
    points.push_back({2.0 * static_cast<double>(half),
                      2.0 * static_cast<double>(half) * passes / t});
  }
  if (points.size() < 6)
    return;
  double within =
      std::max({points[0].second, points[1].second, points[2].second});
  double beyond = points.back().second;
  if (within < 1.25 * beyond) {
    log << llvm::format("calibrate: one core: passes over 2x its level 2 to "
                        "512 MiB at %.1f to %.1f GB/s: no last cache level "
                        "apart from memory\n",
                        within / 1e9, beyond / 1e9);
    return;
  }
  // A footprint within 5% of either rate is on that plateau: its share
  // would be the noise's.
  std::vector<double> shares;
  double largestWithin = 0;
  for (auto [footprint, rate] : points) {
    if (rate > 1.05 * beyond && rate < 0.95 * within)
      shares.push_back(footprint * (1 / rate - 1 / beyond) /
                       (1 / within - 1 / beyond));
    if (rate >= std::sqrt(within * beyond))
      largestWithin = footprint;
  }
  double share = shares.empty() ? largestWithin : gpipe::median(shares);
  host.lastLevelMiBPerCore = share / (1 << 20);
  host.lastLevelGbpsPerCore = within / 1e9;
  host.beyondLastLevelGbpsPerCore = beyond / 1e9;
  log << llvm::format("calibrate: one core: a pass over memory fits the last "
                      "cache level up to about %.0f MiB at %.1f GB/s, far "
                      "beyond it runs at %.1f GB/s\n",
                      host.lastLevelMiBPerCore, within / 1e9, beyond / 1e9);
}

/// The runtime's gradient sum on one core (acc += x, as the runtime runs
/// it) over working sets from a quarter of the core's level 2 to 16 times
/// it, doubling: within the level 2 an addition ran at 105 GB/s here (its
/// two reads and write counted), at 2x the level 2 at 42, where a copy of
/// 4 MiB (the figure the sums were priced at) ran at 28 GB/s. And on to at
/// least 4 times the core's whole cache (`cacheMiB`), past which the
/// figure holds: beyond the largest working set measured a sum is priced
/// as the runtime's copies beyond the caches, and on a core with a 1 MiB
/// level 2 and 17 MiB of a 32 MiB last level the sweep had stopped at 16
/// MiB (80 GB/s), so that ResNet-18's last stage, 41 MB of gradients, had
/// its sums priced at the copies' 12.8 GB/s: 16 ms a step against 8.5
/// measured.
void measureGradientSums(double l2MiB, double cacheMiB,
                         gpipe::HostFigures &host, llvm::raw_ostream &log) {
  if (l2MiB <= 0) {
    log << "calibrate: one core: no level 2 size known: the gradient sums "
           "are priced as copies\n";
    return;
  }
  std::string rates;
  double largest = std::max(16 * l2MiB, 4 * cacheMiB);
  for (int k = -2; l2MiB * std::pow(2.0, k) <= largest; ++k) {
    double mib = l2MiB * std::pow(2.0, k);
    double gbps = gpipe::runtime::cpuGradientSumBandwidth(
                      static_cast<size_t>(mib * (1 << 20))) /
                  1e9;
    host.gradientSumRates.push_back({mib, gbps});
    rates += llvm::formatv("{0}{1:f1}", rates.empty() ? "" : ", ", gbps);
  }
  host.parallelGrainBytes = gpipe::runtime::parallelGrainBytes();
  log << llvm::format("calibrate: one core: the runtime's gradient sums over "
                      "%.2f to %.0f MiB (doubling) at %s GB/s\n",
                      host.gradientSumRates.front().first,
                      host.gradientSumRates.back().first, rates.c_str());
}

/// The runtime's hand-offs between stage threads: a device turn between two
/// threads on this thread's core, a message from it to a blocked receiver
/// on another core of the process's (this core where there is none).
void measureHandoffs(const std::vector<int> &cores, gpipe::HostFigures &host,
                     llvm::raw_ostream &log) {
  int here = sched_getcpu();
  int other = here;
  for (int c : cores)
    if (c != here) {
      other = c;
      break;
    }
  gpipe::runtime::ThreadHandoff h =
      gpipe::runtime::measureThreadHandoff(here, other);
  host.handoffs = {h.turnSeconds, h.wakeSeconds, h.spinSeconds};
  log << llvm::format("calibrate: stage threads: a device turn passed on one "
                      "core in %.1f us, a blocked receiver woken %s in %.1f us "
                      "(receivers spin %.0f us before they block)\n",
                      h.turnSeconds * 1e6,
                      other == here ? "on the same core" : "from another core",
                      h.wakeSeconds * 1e6, h.spinSeconds * 1e6);
}

} // namespace

namespace {
/// The slowest link from rank 0 to another rank (bytes/s and seconds per
/// message) and the reducer's sums over every rank (bytes/s and seconds
/// per ring step); zeros when not run under mpirun.
gpipe::NetworkFigures measureNetwork(llvm::raw_ostream &log,
                                     bool &answeringRank) {
  answeringRank = false;
  gpipe::NetworkFigures figures;
  if (!gpipe::runtime::ProcessGroup::launchedByMpirun())
    return figures;
  std::unique_ptr<gpipe::runtime::ProcessGroup> group =
      gpipe::runtime::ProcessGroup::fromLauncher();
  if (!group || group->size() < 2)
    return figures;
  constexpr size_t kSmall = size_t(64) << 10, kLarge = size_t(4) << 20;
  double bandwidth = 0, latency = 0;
  for (int64_t peer = 1; peer < group->size(); ++peer) {
    if (group->rank() != 0 && group->rank() != peer)
      continue;
    int64_t other = group->rank() == 0 ? peer : 0;
    double small = group->roundTripSeconds(other, 8, 200) / 2;
    double large = group->roundTripSeconds(other, kLarge, 10) / 2;
    double rate = static_cast<double>(kLarge) / std::max(large - small, 1e-9);
    if (group->rank() == 0) {
      log << llvm::format("calibrate: rank 0 to rank %lld: latency %.1f us, "
                          "4 MiB messages %.2f GB/s\n",
                          static_cast<long long>(peer), small * 1e6,
                          rate / 1e9);
      bandwidth = bandwidth == 0 ? rate : std::min(bandwidth, rate);
      latency = std::max(latency, small);
    }
  }
  group->barrier();
  // The sums data parallelism makes, fitted to a ring of P ranks:
  // t(b) = 2 (P-1) latency + 2 (P-1) / P b / bandwidth.
  double p = static_cast<double>(group->size());
  double tSmall = group->allReduceSeconds(kSmall, 20);
  double tLarge = group->allReduceSeconds(kLarge, 10);
  double slope =
      std::max(tLarge - tSmall, 1e-9) / static_cast<double>(kLarge - kSmall);
  double ringBandwidth = 2 * (p - 1) / (p * slope);
  double ringLatency = std::max(
      0.0, (tSmall - slope * static_cast<double>(kSmall)) / (2 * (p - 1)));
  answeringRank = group->rank() != 0;
  if (answeringRank)
    return figures;
  log << llvm::format("calibrate: sums over %lld ranks: 4 MiB in %.2f ms, "
                      "64 KiB in %.3f ms (ring: %.2f GB/s, %.1f us a step)\n",
                      static_cast<long long>(group->size()), tLarge * 1e3,
                      tSmall * 1e3, ringBandwidth / 1e9, ringLatency * 1e6);
  figures.gbps = bandwidth / 1e9;
  figures.latencyUs = latency * 1e6;
  figures.allReduceGbps = ringBandwidth / 1e9;
  figures.allReduceLatencyUs = ringLatency * 1e6;
  return figures;
}
} // namespace

namespace {
/// The cache of the core this thread runs on, in MiB: each data or
/// unified cache of level 2 and up, divided among the CPUs sharing it, and
/// of it level 2's (Linux's /sys/devices/system/cpu/cpuN/cache; 0 where
/// it says nothing).
std::pair<double, double> cacheMiBPerCore() {
  int cpu = sched_getcpu();
  if (cpu < 0)
    return {0, 0};
  double mib = 0, level2 = 0;
  std::string dir =
      "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index";
  for (int i = 0; i < 16; ++i) {
    auto read = [&](const char *file) {
      std::ifstream in(dir + std::to_string(i) + "/" + file);
      std::string text;
      std::getline(in, text);
      return text;
    };
    std::string level = read("level"), type = read("type");
    std::string size = read("size"), shared = read("shared_cpu_list");
    if (level.empty())
      break;
    if (std::atoi(level.c_str()) < 2 || type == "Instruction" || size.empty())
      continue;
    double bytes = std::atof(size.c_str());
    if (size.back() == 'K')
      bytes *= 1024;
    else if (size.back() == 'M')
      bytes *= 1024 * 1024;
    // "0-3,8-11": the CPUs sharing it.
    int sharing = 0;
    std::stringstream list(shared);
    for (std::string range; std::getline(list, range, ',');) {
      size_t dash = range.find('-');
      sharing += dash == std::string::npos
                     ? 1
                     : std::atoi(range.c_str() + dash + 1) -
                           std::atoi(range.c_str()) + 1;
    }
    double share = bytes / std::max(sharing, 1) / (1024.0 * 1024.0);
    mib += share;
    if (std::atoi(level.c_str()) == 2)
      level2 += share;
  }
  return {mib, level2};
}

/// The host with every core of this process's affinity busy: one sgemm on
/// all of them, and one copy per core at once (each pinned to its core).
gpipe::HostFigures measureHost(llvm::raw_ostream &log) {
  gpipe::HostFigures host;
  std::vector<int> cores = gpipe::affinityCores();
  if (cores.size() < 2)
    return host;
  const dnnl_dim_t n = 1024;
  std::vector<float> a(n * n, 0.25f), b(n * n, 0.5f), c(n * n);
  // On a thread of its own, whose OpenMP threads end with it: threads left
  // waiting in this process would outnumber the cores, and OpenMP then
  // puts waiting threads to sleep at once (libgomp's throttled spin), so
  // that every parallel kernel timed after this paid a wake-up (a 2-core
  // convolution's fixed cost measured 150 us instead of 1).
  double gemm = 0;
  std::thread([&] {
    omp_set_num_threads(static_cast<int>(cores.size()));
    gemm = medianSeconds(5, [&] {
      dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                 c.data(), n);
    });
  }).join();
  // 256 MiB in all, as the one-core figure, split over the cores.
  size_t bytes = (size_t(256) << 20) / cores.size();
  std::vector<std::vector<char>> from(cores.size()), to(cores.size());
  for (size_t i = 0; i < cores.size(); ++i) {
    from[i].assign(bytes, 1);
    to[i].assign(bytes, 2);
  }
  double copy = medianSeconds(5, [&] {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < cores.size(); ++i)
      threads.emplace_back([&, i] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cores[i], &one);
        sched_setaffinity(0, sizeof(one), &one);
        std::memcpy(to[i].data(), from[i].data(), bytes);
        from[i][0] = to[i][bytes - 1];
      });
    for (std::thread &t : threads)
      t.join();
  });
  host.cores = static_cast<int64_t>(cores.size());
  host.gflops = 2.0 * n * n * n / gemm / 1e9;
  host.gbps = 2.0 * static_cast<double>(bytes * cores.size()) / copy / 1e9;
  log << llvm::format("calibrate: all %lld cores at once: sgemm %.1f GFLOP/s, "
                      "memory copy %.1f GB/s\n",
                      static_cast<long long>(host.cores), host.gflops,
                      host.gbps);
  return host;
}
} // namespace

std::string gpipe::calibrateCpu(mlir::DialectRegistry &registry,
                                llvm::raw_ostream &log, bool bf16) {
  bool answering = false;
  NetworkFigures network = measureNetwork(log, answering);
  if (answering)
    return "";
  HostFigures host = measureHost(log);
  std::vector<int> cores = affinityCores();
  std::tie(host.cacheMiBPerCore, host.privateCacheMiBPerCore) =
      cacheMiBPerCore();
  // gpipe's own kernels, before this thread is pinned to one core.
  std::array<double, 3> pace{};
  llvm::Expected<llvm::json::Array> kernels =
      calibrateKernels(registry, host.privateCacheMiBPerCore, log, bf16, &pace);
  if (!kernels)
    throw std::runtime_error(llvm::toString(kernels.takeError()));
  // One core: one OpenMP thread for oneDNN, this thread pinned to the core
  // it runs on.
  omp_set_num_threads(1);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(sched_getcpu(), &set);
  sched_setaffinity(0, sizeof(set), &set);
  // The probe gpipe-run takes when a step is off its prediction, taken
  // before every model the kernels' calibration timed: the profile's rate
  // is their median, the pace the kernels' times were scaled to.
  double now = runtime::cpuSgemmGflops();
  double gflops = pace[1] > 0 ? pace[1] : now;
  if (pace[0] > 0 && pace[2] > 1.15 * pace[0])
    log << llvm::format(
        "calibrate: warning: the machine's pace moved during the "
        "calibration (one core's sgemm from %.1f to %.1f GFLOP/s, %.1f at "
        "the end): the profile describes its median pace, %.1f; on a machine "
        "shared with other work predictions are off by as much as its pace "
        "moves (gpipe-run says so when a step is off its prediction)\n",
        pace[0], pace[2], now, gflops);
  double memory = copyBandwidth(size_t(256) << 20, 5) / 1e9;
  double link = copyBandwidth(size_t(4) << 20, 50) / 1e9;
  host.copyGbpsPerCore = measureCopies(log);
  measureLastLevel(host.privateCacheMiBPerCore, host, log);
  measureGradientSums(host.privateCacheMiBPerCore, host.cacheMiBPerCore, host,
                      log);
  measureHandoffs(cores, host, log);
  double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  double memoryGiB =
      pages * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1ull << 30);
  log << llvm::format("calibrate: one core: sgemm %.1f GFLOP/s, memory copy "
                      "%.1f GB/s, 4 MiB transfer %.1f GB/s, %.1f GiB memory\n",
                      gflops, memory, link, memoryGiB);
  return profileJSON(gflops, memory, memoryGiB, link, network, host,
                     std::move(*kernels));
}

std::string gpipe::onednnVersion() {
  const dnnl_version_t *v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
         "." + std::to_string(v->patch);
}

std::vector<int> gpipe::affinityCores() {
  std::vector<int> cores;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        cores.push_back(c);
  return cores;
}

double gpipe::median(std::vector<double> values) {
  size_t n = values.size();
  std::sort(values.begin(), values.end());
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}
