// gpipe-run --calibrate=cuda:N: the figures of a GPU that the compiler's
// cost model uses (peak float32 FLOP/s as cuBLAS reaches them without TF32,
// memory bandwidth, memory size, host link), timed with CUDA events, each
// the median of several runs after a warm-up.
#include "cuda/CudaBackend.h"
#include "cuda/CudaDevice.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime::cuda {

namespace {

void need(cudaError_t err, const char *call) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(call) +
                             " failed: " + cudaGetErrorString(err));
}

void need(cublasStatus_t status, const char *call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) +
                             " failed: " + cublasGetStatusString(status));
}

/// Frees what it holds when the measurement ends, normally or not.
struct Resources {
  std::vector<void *> device, host;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  cublasHandle_t blas = nullptr;
  ~Resources() {
    for (void *p : device)
      cudaFree(p);
    for (void *p : host)
      cudaFreeHost(p);
    if (blas)
      cublasDestroy(blas);
    for (cudaEvent_t e : {begin, end})
      if (e)
        cudaEventDestroy(e);
    if (stream)
      cudaStreamDestroy(stream);
  }
  void *deviceBytes(size_t bytes) {
    void *p = nullptr;
    need(cudaMalloc(&p, bytes), "cudaMalloc");
    device.push_back(p);
    need(cudaMemset(p, 0, bytes), "cudaMemset");
    return p;
  }
  void *pinnedBytes(size_t bytes) {
    void *p = nullptr;
    need(cudaMallocHost(&p, bytes), "cudaMallocHost");
    host.push_back(p);
    return p;
  }
  /// The median seconds of `runs` runs of `work` on the stream.
  double median(int runs, const std::function<void()> &work) {
    work();
    need(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
      need(cudaEventRecord(begin, stream), "cudaEventRecord");
      work();
      need(cudaEventRecord(end, stream), "cudaEventRecord");
      need(cudaEventSynchronize(end), "cudaEventSynchronize");
      float ms = 0;
      need(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
      times.push_back(ms / 1000.0);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

} // namespace

std::string calibrate(int ordinal, std::ostream &log) {
  std::string reason;
  if (ordinal < 0 || ordinal >= deviceCount(&reason))
    throw std::runtime_error(
        "cuda:" + std::to_string(ordinal) + " is not on this host (" +
        (reason.empty() ? "this host has " +
                              std::to_string(deviceCount(nullptr)) + " GPU(s)"
                        : reason) +
        ")");
  need(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaDeviceProp props{};
  need(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties");
  Resources r;
  need(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
       "cudaStreamCreate");
  need(cudaEventCreate(&r.begin), "cudaEventCreate");
  need(cudaEventCreate(&r.end), "cudaEventCreate");
  need(cublasCreate(&r.blas), "cublasCreate");
  need(cublasSetStream(r.blas, r.stream), "cublasSetStream");
  need(cublasSetMathMode(r.blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");

  // float32 products as the stages compute them (no TF32).
  const int n = 4096;
  size_t matrix = size_t(n) * n * sizeof(float);
  auto *a = static_cast<float *>(r.deviceBytes(matrix));
  auto *b = static_cast<float *>(r.deviceBytes(matrix));
  auto *c = static_cast<float *>(r.deviceBytes(matrix));
  float one = 1, zero = 0;
  double gemm = r.median(5, [&] {
    need(cublasSgemm(r.blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b,
                     n, &zero, c, n),
         "cublasSgemm");
  });
  double gflops = 2.0 * n * double(n) * n / gemm / 1e9;

  size_t bytes = size_t(512) << 20;
  void *from = r.deviceBytes(bytes), *to = r.deviceBytes(bytes);
  double copy = r.median(5, [&] {
    need(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, r.stream),
         "cudaMemcpyAsync");
  });
  double memoryGbps = 2.0 * double(bytes) / copy / 1e9; // read + write

  size_t message = size_t(64) << 20;
  void *pinned = r.pinnedBytes(message);
  double upload = r.median(5, [&] {
    need(cudaMemcpyAsync(to, pinned, message, cudaMemcpyHostToDevice, r.stream),
         "cudaMemcpyAsync");
  });
  double linkGbps = double(message) / upload / 1e9;
  double memoryGiB = double(props.totalGlobalMem) / double(1ull << 30);

  // What a kernel costs beyond its work: the host queues every kernel of a
  // phase and the GPU runs them as they come, so a run of small kernels
  // goes at the rate of launches. Timed on the host's clock: many launches
  // of an empty kernel and one wait, per launch (the wait spread over
  // them); the median of several such runs.
  auto hostMedian = [&](int runs, const std::function<void()> &work) {
    work();
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
      auto begin = std::chrono::steady_clock::now();
      work();
      times.push_back(std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - begin)
                          .count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const int launches = 2000;
  double launch =
      hostMedian(7,
                 [&] {
                   for (int i = 0; i < launches; ++i)
                     need(launchEmptyKernel(r.stream), "a kernel launch");
                   need(cudaStreamSynchronize(r.stream),
                        "cudaStreamSynchronize");
                 }) /
      launches;
  // A phase's end: one kernel and the wait for it.
  double wait = hostMedian(101, [&] {
    need(launchEmptyKernel(r.stream), "a kernel launch");
    need(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  });

  log << "calibrate: cuda:" << ordinal << " (" << props.name << "): sgemm "
      << number(gflops) << " GFLOP/s (float32, no TF32), memory copy "
      << number(memoryGbps) << " GB/s, host to GPU " << number(linkGbps)
      << " GB/s, " << number(memoryGiB) << " GiB memory, a kernel launch "
      << number(launch * 1e6) << " us, a launch and a wait "
      << number(wait * 1e6) << " us\n";
  nlohmann::ordered_json profile = {
      {"device", "cuda"},          {"name", props.name},
      {"peak_gflops", gflops},     {"memory_gbps", memoryGbps},
      {"memory_gib", memoryGiB},   {"link_gbps", linkGbps},
      {"launch_us", launch * 1e6}, {"launch_wait_us", wait * 1e6}};
  return profile.dump(2) + "\n";
}

} // namespace gpipe::runtime::cuda
