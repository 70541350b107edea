#include "CudaBackend.h"

#include "Clock.h"
#include "CudaDevice.h"
#include "NativeLibrary.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpipe::runtime::cuda {

void check(cudaError_t err, const std::string &device, const char *call) {
  if (err != cudaSuccess)
    throw BundleError(device + ": " + call +
                      " failed: " + cudaGetErrorString(err));
}

void check(cublasStatus_t status, const std::string &device, const char *call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw BundleError(device + ": " + call +
                      " failed: " + cublasGetStatusString(status));
}

#ifdef GPIPE_HAVE_CUDNN
void check(cudnnStatus_t status, const std::string &device, const char *call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw BundleError(device + ": " + call +
                      " failed: " + cudnnGetErrorString(status));
}
#endif

namespace {

void freeDevice(char *p) { cudaFree(p); }
void freePinned(char *p) { cudaFreeHost(p); }

std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in)
    throw BundleError(path + ": cannot read the stage's device code");
  return bytes.str();
}

} // namespace

DeviceBuffer CudaDevice::allocate(int64_t size) const {
  use();
  // cudaMalloc aligns to 256 bytes, enough for any kernel.
  size_t bytes = static_cast<size_t>(std::max<int64_t>(size, 1));
  char *p = nullptr;
  cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&p), bytes);
  if (err != cudaSuccess)
    throw BundleError(name + ": cannot allocate " + std::to_string(bytes) +
                      " bytes of GPU memory: " + cudaGetErrorString(err));
  return DeviceBuffer(p, freeDevice);
}

void CudaDevice::reserveWorkspace(int64_t bytes) {
  if (bytes <= workspaceBytes)
    return;
  workspace = DeviceBuffer();
  workspaceBytes = 0;
  workspace = allocate(bytes);
  workspaceBytes = bytes;
}

/// The GPU's objects, and a pinned host buffer that copies between host
/// and GPU memory go through (page-locked memory is what the GPU's copy
/// engines read and write directly).
struct CudaBackend::State : CudaDevice {
  DeviceBuffer pinned;
  int64_t pinnedBytes = 0;
  /// Timing events: the reference and the marks (a pool, reused), and the
  /// host's clock when the reference passed.
  cudaEvent_t reference = nullptr;
  std::vector<cudaEvent_t> events;
  size_t used = 0;
  double referenceSeconds = 0;

  char *staging(int64_t bytes) {
    if (bytes > pinnedBytes) {
      pinned = DeviceBuffer();
      char *p = nullptr;
      check(cudaMallocHost(reinterpret_cast<void **>(&p),
                           static_cast<size_t>(bytes)),
            name, "cudaMallocHost (pinned copy buffer)");
      pinned = DeviceBuffer(p, freePinned);
      pinnedBytes = bytes;
    }
    return pinned.get();
  }
};

namespace {

/// The host library of a CUDA stage and its GPU kernels, launched on the
/// stage's stream.
class CudaCode : public StageCode {
public:
  CudaCode(const CudaDevice &device, const std::string &library,
           const std::string &image, const std::vector<std::string> &names)
      : device(device), host(library) {
    device.use();
    check(cudaLibraryLoadData(&module, image.c_str(), nullptr, nullptr, 0,
                              nullptr, nullptr, 0),
          device.name, "cudaLibraryLoadData (the stage's kernels)");
    for (const std::string &name : names) {
      cudaKernel_t kernel = nullptr;
      check(cudaLibraryGetKernel(&kernel, module, name.c_str()), device.name,
            ("cudaLibraryGetKernel " + name).c_str());
      kernels.push_back(kernel);
    }
  }
  ~CudaCode() override {
    if (module)
      cudaLibraryUnload(module);
  }
  Entry entry(const std::string &name) const override {
    return host.entry(name);
  }
  void launch(const KernelLaunch &l) override {
    device.use();
    if (l.kernel < 0 || l.kernel >= static_cast<int64_t>(kernels.size()))
      throw BundleError(device.name +
                        ": the stage code launched unknown "
                        "kernel " +
                        std::to_string(l.kernel));
    for (int i = 0; i < 3; ++i) {
      if (l.grid[i] <= 0 || l.block[i] <= 0)
        return; // a loop over no elements
      if (l.grid[i] > (i ? 65535 : 2147483647) || l.block[i] > 1024)
        throw BundleError(device.name + ": the stage code launched kernel " +
                          std::to_string(l.kernel) +
                          " with a grid or block beyond CUDA's limits");
    }
    // The argument pointers, on the stack for the usual few (every
    // element-wise op launches a kernel: no allocation per launch).
    void *fixed[64];
    std::vector<void *> many;
    void **args = fixed;
    if (l.count > 64) {
      many.resize(static_cast<size_t>(l.count));
      args = many.data();
    }
    for (int64_t i = 0; i < l.count; ++i)
      args[i] = &l.arguments[i];
    dim3 grid(static_cast<unsigned>(l.grid[0]),
              static_cast<unsigned>(l.grid[1]),
              static_cast<unsigned>(l.grid[2]));
    dim3 block(static_cast<unsigned>(l.block[0]),
               static_cast<unsigned>(l.block[1]),
               static_cast<unsigned>(l.block[2]));
    check(cudaLaunchKernel(reinterpret_cast<const void *>(kernels[l.kernel]),
                           grid, block, args, 0, device.stream),
          device.name, "cudaLaunchKernel");
  }

private:
  const CudaDevice &device;
  NativeLibrary host;
  cudaLibrary_t module = nullptr;
  std::vector<cudaKernel_t> kernels;
};

/// Makes the kernel's GPU current before it runs (a stage's kernels run on
/// its thread, which may have used another GPU).
class OnDevice : public Kernel {
public:
  OnDevice(const CudaDevice &device, std::unique_ptr<Kernel> inner)
      : device(device), inner(std::move(inner)) {}
  void run() override {
    device.use();
    inner->run();
  }

private:
  const CudaDevice &device;
  std::unique_ptr<Kernel> inner;
};

/// Copies larger than this go through the pinned buffer in pieces.
constexpr int64_t kPinnedChunk = int64_t(64) << 20;

} // namespace

CudaBackend::CudaBackend(std::string name, int ordinal)
    : name_(std::move(name)), device(std::make_unique<State>()) {
  device->name = name_;
  device->ordinal = ordinal;
  device->use();
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, ordinal), name_,
        "cudaGetDeviceProperties");
  device->arch =
      "sm_" + std::to_string(props.major) + std::to_string(props.minor);
  check(cudaStreamCreateWithFlags(&device->stream, cudaStreamNonBlocking),
        name_, "cudaStreamCreate");
  check(cublasCreate(&device->blas), name_, "cublasCreate");
  check(cublasSetStream(device->blas, device->stream), name_,
        "cublasSetStream");
  // float32 as on the CPU: the default math keeps float32's precision
  // (TF32 only with CUBLAS_TF32_TENSOR_OP_MATH), as PyTorch with TF32 off.
  check(cublasSetMathMode(device->blas, CUBLAS_DEFAULT_MATH), name_,
        "cublasSetMathMode");
#ifdef GPIPE_HAVE_CUDNN
  check(cudnnCreate(&device->dnn), name_, "cudnnCreate");
  check(cudnnSetStream(device->dnn, device->stream), name_, "cudnnSetStream");
#endif
}

CudaBackend::~CudaBackend() {
  // No throwing here: after a GPU fault every call reports it again.
  cudaSetDevice(device->ordinal);
  if (device->stream)
    cudaStreamSynchronize(device->stream);
  for (cudaEvent_t e : device->events)
    cudaEventDestroy(e);
  if (device->reference)
    cudaEventDestroy(device->reference);
#ifdef GPIPE_HAVE_CUDNN
  if (device->dnn)
    cudnnDestroy(device->dnn);
#endif
  if (device->blas)
    cublasDestroy(device->blas);
  if (device->stream)
    cudaStreamDestroy(device->stream);
}

DeviceBuffer CudaBackend::allocate(int64_t size) {
  DeviceBuffer buffer = device->allocate(size);
  check(cudaMemsetAsync(buffer.get(), 0,
                        static_cast<size_t>(std::max<int64_t>(size, 1)),
                        device->stream),
        name_, "cudaMemsetAsync");
  device->wait();
  return buffer;
}

void CudaBackend::copyToDevice(char *dst, const void *src, int64_t bytes) {
  device->use();
  const char *from = static_cast<const char *>(src);
  char *pinned = device->staging(std::min(bytes, kPinnedChunk));
  for (int64_t done = 0; done < bytes; done += kPinnedChunk) {
    int64_t n = std::min(bytes - done, kPinnedChunk);
    // The previous piece has left the pinned buffer (the wait below).
    std::memcpy(pinned, from + done, static_cast<size_t>(n));
    check(cudaMemcpyAsync(dst + done, pinned, static_cast<size_t>(n),
                          cudaMemcpyHostToDevice, device->stream),
          name_, "cudaMemcpyAsync to the GPU");
    device->wait();
  }
}

void CudaBackend::copyToHost(void *dst, const char *src, int64_t bytes) {
  device->use();
  char *to = static_cast<char *>(dst);
  char *pinned = device->staging(std::min(bytes, kPinnedChunk));
  for (int64_t done = 0; done < bytes; done += kPinnedChunk) {
    int64_t n = std::min(bytes - done, kPinnedChunk);
    check(cudaMemcpyAsync(pinned, src + done, static_cast<size_t>(n),
                          cudaMemcpyDeviceToHost, device->stream),
          name_, "cudaMemcpyAsync from the GPU");
    device->wait();
    std::memcpy(to + done, pinned, static_cast<size_t>(n));
  }
}

void CudaBackend::copyOnDevice(char *dst, const char *src, int64_t bytes) {
  device->use();
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                        cudaMemcpyDeviceToDevice, device->stream),
        name_, "cudaMemcpyAsync on the GPU");
  device->wait();
}

void CudaBackend::accumulate(float *dst, const float *src, int64_t count) {
  device->use();
  float one = 1;
  // Element-wise adds: the same result whatever the order of threads; in
  // pieces that cuBLAS's int counts hold.
  constexpr int64_t kPiece = int64_t(1) << 30;
  for (int64_t done = 0; done < count; done += kPiece)
    check(cublasSaxpy(device->blas,
                      static_cast<int>(std::min(count - done, kPiece)), &one,
                      src + done, 1, dst + done, 1),
          name_, "cublasSaxpy (gradient accumulation)");
  device->wait();
}
std::unique_ptr<StageCode> CudaBackend::loadCode(const Bundle &bundle,
                                                 const StageSpec &stage) {
  std::string library = bundle.partPath(stage.library);
  if (!stage.deviceCode)
    throw BundleError(bundle.path + ": stage " + std::to_string(stage.index) +
                      " was compiled for a CPU, not for " + name_ +
                      " (recompile with --devices naming " + name_ + ")");
  const StageSpec::DeviceCode &code = *stage.deviceCode;
  // The cubin of this GPU's architecture, else the PTX for the driver to
  // compile (also for newer GPUs than the one compiled for).
  std::string image;
  if (code.cubin && code.arch == device->arch)
    image = readBytes(bundle.partPath(code.cubin->file));
  else if (code.ptx)
    image = readBytes(bundle.partPath(code.ptx->file));
  else if (!code.kernels.empty())
    throw BundleError(bundle.path + ": stage " + std::to_string(stage.index) +
                      " has a cubin for " + code.arch + " only, and " + name_ +
                      " is " + device->arch);
  if (code.kernels.empty())
    return std::make_unique<NativeLibrary>(library);
  return std::make_unique<CudaCode>(*device, library, image, code.kernels);
}

std::unique_ptr<Kernel> CudaBackend::createKernel(const KernelSpec &spec,
                                                  const KernelMemory &memory) {
  device->use();
  auto type = spec.strings.find("compute_type");
  if (type != spec.strings.end() && type->second != "f32")
    spec.fail("multiplies in " + type->second +
              " (--precision=bf16), which the CUDA backend does not do yet: "
              "compile the model's GPU stages with --precision=fp32");
  for (auto create : {createBlasKernel, createConvKernel, createCudaBodyKernel})
    if (std::unique_ptr<Kernel> kernel = create(*device, spec, memory))
      return std::make_unique<OnDevice>(*device, std::move(kernel));
  spec.fail("the CUDA backend has no kernel of this kind");
}

void CudaBackend::beginMarks() {
  device->use();
  if (!device->reference)
    check(cudaEventCreate(&device->reference), name_, "cudaEventCreate");
  check(cudaEventRecord(device->reference, device->stream), name_,
        "cudaEventRecord");
  check(cudaEventSynchronize(device->reference), name_, "cudaEventSynchronize");
  device->referenceSeconds = steadySeconds();
  device->used = 0;
}

int64_t CudaBackend::mark() {
  device->use();
  if (!device->reference)
    beginMarks();
  if (device->used == device->events.size()) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), name_, "cudaEventCreate");
    device->events.push_back(e);
  }
  check(cudaEventRecord(device->events[device->used], device->stream), name_,
        "cudaEventRecord");
  return static_cast<int64_t>(device->used++);
}

double CudaBackend::markSeconds(int64_t mark) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, device->reference,
                             device->events.at(static_cast<size_t>(mark))),
        name_, "cudaEventElapsedTime");
  return device->referenceSeconds + ms / 1000.0;
}

void CudaBackend::synchronize() {
  device->use();
  device->wait();
}

} // namespace gpipe::runtime::cuda
