// gemm and matmul of the CUDA backend on cuBLAS, in float32 (no
// TF32 rounding: the same float32 products as the CPU, in another order).
#include "../CudaDevice.h"

#include <algorithm>
#include <vector>

namespace gpipe::runtime::cuda {

namespace {

/// ONNX Gemm on row-major tensors through cuBLAS's column-major sgemm:
/// Y^T = alpha op(B)^T op(A)^T + beta C^T, C broadcast into Y first (a
/// rank-1 update with a vector of ones for a row or column bias).
class GemmKernel : public Kernel {
public:
  GemmKernel(const CudaDevice &device, const KernelSpec &spec,
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
    A = reinterpret_cast<const float *>(mem.address(a));
    B = reinterpret_cast<const float *>(mem.address(b));
    Y = reinterpret_cast<float *>(mem.address(out));
    if (c) {
      C = reinterpret_cast<const float *>(mem.address(*c));
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
      ones = device.allocate(static_cast<int64_t>(one.size() * sizeof(float)));
      check(cudaMemcpyAsync(ones.get(), one.data(), one.size() * sizeof(float),
                            cudaMemcpyHostToDevice, device.stream),
            device.name, "cudaMemcpyAsync");
      device.wait();
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
  const CudaDevice &device;
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
  MatmulKernel(const CudaDevice &device, const KernelSpec &spec,
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
    // The product's batch dimensions broadcast the operands' (NumPy,
    // aligned on the right); an operand takes part with all of them (its
    // own, leading ones aside, equal the product's) or with none (stride 0).
    std::vector<int64_t> lDims(l.begin(), l.end() - 2),
        rDims(r.begin(), r.end() - 2);
    size_t rank = std::max(lDims.size(), rDims.size());
    lDims.insert(lDims.begin(), rank - lDims.size(), 1);
    rDims.insert(rDims.begin(), rank - rDims.size(), 1);
    std::vector<int64_t> outDims(rank);
    for (size_t i = 0; i < rank; ++i)
      outDims[i] = std::max(lDims[i], rDims[i]);
    auto product = [](const std::vector<int64_t> &dims) {
      int64_t p = 1;
      for (int64_t d : dims)
        p *= d;
      return p;
    };
    batch = product(outDims);
    int64_t lb = product(lDims), rb = product(rDims);
    if ((lb != 1 && lDims != outDims) || (rb != 1 && rDims != outDims))
      spec.fail("the CUDA backend broadcasts an operand's batch dimensions "
                "all together or not at all");
    strideA = lb == 1 ? 0 : m * k;
    strideB = rb == 1 ? 0 : k * n;
    A = reinterpret_cast<const float *>(mem.address(a));
    B = reinterpret_cast<const float *>(mem.address(b));
    Y = reinterpret_cast<float *>(mem.address(out));
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
  const CudaDevice &device;
  int64_t m = 0, n = 0, k = 0, batch = 1, strideA = 0, strideB = 0;
  const float *A = nullptr, *B = nullptr;
  float *Y = nullptr;
};

} // namespace

std::unique_ptr<Kernel> createBlasKernel(CudaDevice &device,
                                         const KernelSpec &spec,
                                         const KernelMemory &memory) {
  if (spec.kind == "gemm")
    return std::make_unique<GemmKernel>(device, spec, memory);
  if (spec.kind == "matmul")
    return std::make_unique<MatmulKernel>(device, spec, memory);
  return nullptr;
}

} // namespace gpipe::runtime::cuda
