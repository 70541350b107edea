#include "gpipe/runtime/RuntimeInfo.h"

#include "gpipe/common/CpuFeatures.h"

#include "CudaPlugin.h"
#include "ParallelFor.h"

#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <omp.h>

namespace gpipe::runtime {

bool cpuMultipliesBf16() {
  // oneDNN's bfloat16 kernels need AVX-512 (avx512_core: converted in
  // software; avx512_core_bf16 and AMX: in hardware). The CPU backend's
  // productType (kernels/OneDnn.cpp) asks this.
  auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

double cpuSgemmGflops() {
  const dnnl_dim_t n = 1024;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<double> seconds;
  for (int i = 0; i < 5; ++i) {
    auto begin = std::chrono::steady_clock::now();
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
               c.data(), n);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
            .count());
  }
  omp_set_num_threads(threads);
  std::nth_element(seconds.begin(), seconds.begin() + 2, seconds.end());
  return 2.0 * n * n * n / seconds[2] / 1e9;
}

double cpuGradientSumBandwidth(size_t workingSetBytes) {
  size_t n = std::max<size_t>(16, workingSetBytes / 2 / sizeof(float));
  std::vector<float> acc(n, 1.0f), x(n, 0.5f);
  // Passes of about 2 ms (at 50 GB/s), at least one.
  double bytes = 3.0 * sizeof(float) * static_cast<double>(n);
  int passes = static_cast<int>(std::max(1.0, 1e8 / bytes));
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<double> seconds;
  for (int i = 0; i < 8; ++i) {
    auto begin = std::chrono::steady_clock::now();
    for (int p = 0; p < passes; ++p) {
      parallelAccumulate(acc.data(), x.data(), static_cast<int64_t>(n));
      // Keeps the sums from growing without bound.
      x[static_cast<size_t>(p) % n] = -x[static_cast<size_t>(p) % n];
    }
    if (i > 0) // the first warms the caches
      seconds.push_back(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - begin)
                            .count());
  }
  omp_set_num_threads(threads);
  std::nth_element(seconds.begin(), seconds.begin() + 3, seconds.end());
  return bytes * passes / seconds[3];
}

int64_t parallelGrainBytes() { return kParallelGrainBytes; }

std::string onednnVersion() {
  const dnnl_version_t *v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

int cudaDeviceCount(std::string *reason) {
  const CudaPluginApi *cuda = cudaPlugin(reason);
  return cuda ? cuda->deviceCount(reason) : 0;
}

std::string cudaVersion() {
  std::string reason;
  const CudaPluginApi *cuda = cudaPlugin(&reason);
  return cuda ? cuda->version() : reason;
}

std::string calibrateGpu(int ordinal, std::ostream &log) {
  std::string reason;
  const CudaPluginApi *cuda = cudaPlugin(&reason);
  if (!cuda)
    throw std::runtime_error(reason);
  return cuda->calibrate(ordinal, log);
}

std::string deviceMissing(const Device &device) {
  if (device.kind == DeviceKind::Cuda) {
    std::string reason;
    int gpus = cudaDeviceCount(&reason);
    if (device.ids.front() < gpus)
      return "";
    return gpus ? "this host has " + std::to_string(gpus) + " GPU(s)" : reason;
  }
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (int core : device.ids)
    if (static_cast<unsigned>(core) >= cores)
      return "this host has " + std::to_string(cores) + " cores";
  return "";
}

std::string runtimeInfo(bool probeGpus) {
  std::string info = "oneDNN " + onednnVersion() + " (CPU kernels), " +
                     std::to_string(std::thread::hardware_concurrency()) +
                     " CPU cores\n";
  // What bundles this CPU runs: gpipe-opt --target-cpu for a portable one.
  std::string features;
  for (const std::string &name : hostCpuFeatures())
    features += " " + name;
  info += "CPU: runs bundles compiled for --target-cpu=" +
          hostMicroarchitectureLevel() + " (or host here); features" +
          features + "\n";
  info += cpuMultipliesBf16()
              ? "CPU bfloat16 products (--precision=bf16): yes\n"
              : "CPU bfloat16 products (--precision=bf16): no (oneDNN's need "
                "AVX-512; compile with --precision=fp32)\n";
  std::string reason;
  if (!probeGpus) {
    info += "CUDA: " + cudaPluginSummary() + "\n";
  } else if (const CudaPluginApi *cuda = cudaPlugin(&reason)) {
    int gpus = cuda->deviceCount(&reason);
    info += "CUDA: " + cuda->version() + "; " +
            (gpus > 0 ? std::to_string(gpus) + " device(s)" : reason) + "\n";
  } else {
    info += "CUDA: " + reason + "\n";
  }
  info += "MPI: " + mpiVersion() + "\n";
  return info;
}

} // namespace gpipe::runtime
