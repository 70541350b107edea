//===- Calibrate.cpp - Measuring this machine's cores ---------------------===//
#include "Calibrate.h"

#include "Analysis/CostModel.h"

#include "llvm/Support/Format.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
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
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double copyBandwidth(size_t bytes, int repeats) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double t = medianSeconds(repeats, [&] {
    std::memcpy(b.data(), a.data(), bytes);
    a[0] = b[bytes - 1];
  });
  return 2.0 * static_cast<double>(bytes) / t; // read + write
}

} // namespace

std::string gpipe::calibrateCpu(llvm::raw_ostream &log) {
  // One core: one OpenMP thread for oneDNN, this thread pinned to the core
  // it runs on.
  omp_set_num_threads(1);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(sched_getcpu(), &set);
  sched_setaffinity(0, sizeof(set), &set);
  const dnnl_dim_t n = 1024;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  double gemm = medianSeconds(5, [&] {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
               c.data(), n);
  });
  double gflops = 2.0 * n * n * n / gemm / 1e9;
  double memory = copyBandwidth(size_t(256) << 20, 5) / 1e9;
  double link = copyBandwidth(size_t(4) << 20, 50) / 1e9;
  double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  double memoryGiB =
      pages * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1ull << 30);
  log << llvm::format("calibrate: one core: sgemm %.1f GFLOP/s, memory copy "
                      "%.1f GB/s, 4 MiB transfer %.1f GB/s, %.1f GiB memory\n",
                      gflops, memory, link, memoryGiB);
  return profileJSON(gflops, memory, memoryGiB, link);
}
