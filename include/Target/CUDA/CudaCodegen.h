//===- CudaCodegen.h - Stage modules to PTX and host code -------*- C++ -*-===//
//
// The CUDA stage target. A lowered stage module holds, per phase, an entry
// that calls the runtime's kernels (gpipe_kernel: cuBLAS/cuDNN work on a
// CUDA device) and one function per fused element-wise op (linalg on views
// of the arena and the parameters). For a GPU, every such op becomes a GPU
// kernel through MLIR's GPU path (linalg -> scf.parallel, tiled and mapped
// to blocks and threads -> gpu.launch -> outlined gpu.func -> NVVM -> PTX
// with LLVM's NVPTX backend), and its host function launches it through the
// runtime: gpipe_cuda_launch(context, kernel, grid, block, arguments). The
// host part is native code as for CPU stages (NativeCodegen); it computes
// device addresses but never reads device memory.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_TARGET_CUDA_CUDACODEGEN_H
#define GPIPE_TARGET_CUDA_CUDACODEGEN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace gpipe {

/// What a stage's GPU kernels compile to.
struct CudaDeviceCode {
  /// The architecture ("sm_80") and the PTX of every kernel of the stage.
  std::string arch, ptx;
  /// The kernels in the order of gpipe_cuda_launch's kernel index.
  std::vector<std::string> kernels;
};

/// Threads per block of the element-wise kernels.
constexpr int64_t kCudaThreadsPerBlock = 256;

/// Moves every element-wise op of `module`'s stage functions to GPU
/// kernels compiled for `arch` (PTX into `code`), leaving host code that
/// launches them; the module is then ready for the native host lowering.
/// Errors are diagnostics on the module (an op left on the host that would
/// read device memory, a kernel NVVM cannot lower).
mlir::LogicalResult outlineCudaKernels(mlir::ModuleOp module,
                                       llvm::StringRef arch,
                                       CudaDeviceCode &code);

/// ptxas from the CUDA toolkit (PATH, then /usr/local/cuda/bin), or "".
std::string findPtxas();

/// Assembles `ptx` for `arch` into a cubin with ptxas; the error text
/// (ptxas's own messages) in `error` on failure.
bool assemblePtx(llvm::StringRef ptx, llvm::StringRef arch,
                 llvm::StringRef ptxas, std::string &cubin, std::string &error);

} // namespace gpipe

#endif // GPIPE_TARGET_CUDA_CUDACODEGEN_H
