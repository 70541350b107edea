#include "CudaBackend.h"

#include "NativeLibrary.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpipe::runtime::cuda {

namespace {

/// Throws BundleError naming the device, the call and CUDA's reason.
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

void freeDevice(char *p) { cudaFree(p); }

std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in)
    throw BundleError(path + ": cannot read the stage's device code");
  return bytes.str();
}

} // namespace

struct CudaBackend::Device {
  std::string name;
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  /// "sm_90": the architecture whose cubin this GPU runs.
  std::string arch;

  /// Makes this GPU the calling thread's current one (each stage runs on
  /// its own thread).
  void use() const { check(cudaSetDevice(ordinal), name, "cudaSetDevice"); }
  void wait() const {
    check(cudaStreamSynchronize(stream), name, "cudaStreamSynchronize");
  }
};

namespace {

/// The host library of a CUDA stage and its GPU kernels, launched on the
/// stage's stream.
class CudaCode : public StageCode {
public:
  CudaCode(const CudaBackend::Device &device, const std::string &library,
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
    std::vector<void *> args(static_cast<size_t>(l.count));
    for (int64_t i = 0; i < l.count; ++i)
      args[i] = &l.arguments[i];
    dim3 grid(static_cast<unsigned>(l.grid[0]),
              static_cast<unsigned>(l.grid[1]),
              static_cast<unsigned>(l.grid[2]));
    dim3 block(static_cast<unsigned>(l.block[0]),
               static_cast<unsigned>(l.block[1]),
               static_cast<unsigned>(l.block[2]));
    check(cudaLaunchKernel(reinterpret_cast<const void *>(kernels[l.kernel]),
                           grid, block, args.data(), 0, device.stream),
          device.name, "cudaLaunchKernel");
  }

private:
  const CudaBackend::Device &device;
  NativeLibrary host;
  cudaLibrary_t module = nullptr;
  std::vector<cudaKernel_t> kernels;
};

/// ONNX Gemm on row-major tensors through cuBLAS's column-major sgemm:
/// Y^T = alpha op(B)^T op(A)^T + beta C^T, C broadcast into Y first (a
/// rank-1 update with a vector of ones for a row or column bias).
class GemmKernel : public Kernel {
public:
  GemmKernel(const CudaBackend::Device &device, const KernelSpec &spec,
             const KernelMemory &mem)
      : device(device) {
    const TensorSlot &a = spec.operand("a"), &b = spec.operand("b");
    const TensorSlot *c = spec.optionalOperand("c");
    const TensorSlot &out = spec.result("output");
    if (a.shape.size() != 2 || b.shape.size() != 2 || out.shape.size() != 2)
      spec.fail("operands must be 2-D");
    for (const TensorSlot *t : {&a, &b, &out, c})
      if (t && t->dtype != DType::F32)
        spec.fail("only float32 kernels are implemented");
    transA = spec.flag("trans_a");
    transB = spec.flag("trans_b");
    alpha = static_cast<float>(spec.number("alpha"));
    beta = static_cast<float>(spec.number("beta"));
    m = out.shape[0];
    n = out.shape[1];
    k = transA ? a.shape[0] : a.shape[1];
    A = reinterpret_cast<const float *>(address(a, mem));
    B = reinterpret_cast<const float *>(address(b, mem));
    Y = reinterpret_cast<float *>(address(out, mem));
    if (c) {
      C = reinterpret_cast<const float *>(address(*c, mem));
      std::vector<int64_t> shape = c->shape;
      while (shape.size() < 2)
        shape.insert(shape.begin(), 1);
      cRows = shape[0];
      cCols = shape[1];
      if ((cRows != 1 && cRows != m) || (cCols != 1 && cCols != n) ||
          (cRows == 1 && cCols == 1))
        spec.fail("the CUDA backend adds C of shape [M, N], [N] or [M, 1] "
                  "only");
      std::vector<float> one(static_cast<size_t>(std::max(m, n)), 1.0f);
      char *p = nullptr;
      check(
          cudaMalloc(reinterpret_cast<void **>(&p), one.size() * sizeof(float)),
          device.name, "cudaMalloc");
      ones = DeviceBuffer(p, freeDevice);
      check(cudaMemcpy(p, one.data(), one.size() * sizeof(float),
                       cudaMemcpyHostToDevice),
            device.name, "cudaMemcpy");
    }
  }
  void run() override {
    device.use();
    float zero = 0, one = 1, scale = beta;
    if (C && cRows == m && cCols == n) {
      check(cudaMemcpyAsync(Y, C, m * n * sizeof(float),
                            cudaMemcpyDeviceToDevice, device.stream),
            device.name, "cudaMemcpyAsync");
    } else if (C) {
      const float *onesData = reinterpret_cast<const float *>(ones.get());
      check(cudaMemsetAsync(Y, 0, m * n * sizeof(float), device.stream),
            device.name, "cudaMemsetAsync");
      // Column-major Y^T (n x m) += x y^T.
      const float *x = cRows == 1 ? C : onesData;
      const float *y = cRows == 1 ? onesData : C;
      check(cublasSger(device.blas, static_cast<int>(n), static_cast<int>(m),
                       &one, x, 1, y, 1, Y, static_cast<int>(n)),
            device.name, "cublasSger (gemm bias)");
    } else {
      scale = 0;
    }
    check(cublasSgemm(device.blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                      transA ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                      static_cast<int>(m), static_cast<int>(k), &alpha, B,
                      static_cast<int>(transB ? k : n), A,
                      static_cast<int>(transA ? m : k), C ? &scale : &zero, Y,
                      static_cast<int>(n)),
          device.name, "cublasSgemm");
  }

private:
  static char *address(const TensorSlot &slot, const KernelMemory &mem) {
    return (slot.space == "params" ? mem.params : mem.arena) + slot.offset;
  }

  const CudaBackend::Device &device;
  bool transA = false, transB = false;
  float alpha = 1, beta = 1;
  int64_t m = 0, n = 0, k = 0, cRows = 0, cCols = 0;
  const float *A = nullptr, *B = nullptr, *C = nullptr;
  float *Y = nullptr;
  DeviceBuffer ones;
};

/// NumPy matmul on row-major tensors: one strided-batched sgemm over the
/// batch dimensions, an operand without them (or with batch 1) reused for
/// every product (stride 0).
class MatmulKernel : public Kernel {
public:
  MatmulKernel(const CudaBackend::Device &device, const KernelSpec &spec,
               const KernelMemory &mem)
      : device(device) {
    const TensorSlot &a = spec.operand("lhs"), &b = spec.operand("rhs");
    const TensorSlot &out = spec.result("output");
    for (const TensorSlot *t : {&a, &b, &out})
      if (t->dtype != DType::F32)
        spec.fail("only float32 kernels are implemented");
    std::vector<int64_t> l = a.shape, r = b.shape;
    if (l.size() == 1)
      l.insert(l.begin(), 1);
    if (r.size() == 1)
      r.push_back(1);
    m = l[l.size() - 2];
    k = l.back();
    n = r.back();
    auto batchOf = [](const std::vector<int64_t> &s) {
      int64_t b = 1;
      for (size_t i = 0; i + 2 < s.size(); ++i)
        b *= s[i];
      return b;
    };
    int64_t lb = batchOf(l), rb = batchOf(r);
    batch = std::max(lb, rb);
    if ((lb != 1 && lb != batch) || (rb != 1 && rb != batch) ||
        (lb == batch && rb == batch && l.size() != r.size()))
      spec.fail("the CUDA backend broadcasts one operand's batch only");
    strideA = lb == 1 ? 0 : m * k;
    strideB = rb == 1 ? 0 : k * n;
    A = reinterpret_cast<const float *>(
        (a.space == "params" ? mem.params : mem.arena) + a.offset);
    B = reinterpret_cast<const float *>(
        (b.space == "params" ? mem.params : mem.arena) + b.offset);
    Y = reinterpret_cast<float *>(mem.arena + out.offset);
  }
  void run() override {
    device.use();
    float one = 1, zero = 0;
    check(cublasSgemmStridedBatched(
              device.blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
              static_cast<int>(m), static_cast<int>(k), &one, B,
              static_cast<int>(n), strideB, A, static_cast<int>(k), strideA,
              &zero, Y, static_cast<int>(n), m * n, static_cast<int>(batch)),
          device.name, "cublasSgemmStridedBatched");
  }

private:
  const CudaBackend::Device &device;
  int64_t m = 0, n = 0, k = 0, batch = 1, strideA = 0, strideB = 0;
  const float *A = nullptr, *B = nullptr;
  float *Y = nullptr;
};

} // namespace

CudaBackend::CudaBackend(std::string name, int ordinal)
    : name_(std::move(name)), device(std::make_unique<Device>()) {
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
  // float32 as on the CPU: no TF32 tensor-core rounding.
  check(cublasSetMathMode(device->blas, CUBLAS_PEDANTIC_MATH), name_,
        "cublasSetMathMode");
}

CudaBackend::~CudaBackend() {
  if (device->blas)
    cublasDestroy(device->blas);
  if (device->stream)
    cudaStreamDestroy(device->stream);
}

DeviceBuffer CudaBackend::allocate(int64_t size) {
  device->use();
  size_t bytes =
      (static_cast<size_t>(std::max<int64_t>(size, 1)) + 255) / 256 * 256;
  char *p = nullptr;
  cudaError_t err = cudaMalloc(reinterpret_cast<void **>(&p), bytes);
  if (err != cudaSuccess)
    throw BundleError(name_ + ": cannot allocate " + std::to_string(bytes) +
                      " bytes of GPU memory: " + cudaGetErrorString(err));
  DeviceBuffer buffer(p, freeDevice);
  check(cudaMemsetAsync(p, 0, bytes, device->stream), name_, "cudaMemsetAsync");
  device->wait();
  return buffer;
}

void CudaBackend::copyToDevice(char *dst, const void *src, int64_t bytes) {
  device->use();
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                        cudaMemcpyHostToDevice, device->stream),
        name_, "cudaMemcpyAsync to the GPU");
  device->wait();
}

void CudaBackend::copyToHost(void *dst, const char *src, int64_t bytes) {
  device->use();
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                        cudaMemcpyDeviceToHost, device->stream),
        name_, "cudaMemcpyAsync from the GPU");
  device->wait();
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
  // Element-wise adds: the same result whatever the order of threads.
  check(
      cublasSaxpy(device->blas, static_cast<int>(count), &one, src, 1, dst, 1),
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
  if (spec.kind == "gemm")
    return std::make_unique<GemmKernel>(*device, spec, memory);
  if (spec.kind == "matmul")
    return std::make_unique<MatmulKernel>(*device, spec, memory);
  spec.fail("the CUDA backend has no kernel of this kind yet (gemm and "
            "matmul only; docs/cuda.md)");
}

void CudaBackend::synchronize() {
  device->use();
  device->wait();
}

} // namespace gpipe::runtime::cuda
