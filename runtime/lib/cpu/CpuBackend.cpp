#include "CpuBackend.h"

#include "kernels/Families.h"

#include "NativeLibrary.h"
#include "ParallelFor.h"

#include <cstdlib>
#include <cstring>

namespace gpipe::runtime::cpu {

namespace {

void freeAligned(char *p) { std::free(p); }

} // namespace

CpuBackend::CpuBackend(std::string name)
    : name_(std::move(name)), dnn(std::make_unique<OneDnn>()) {}

CpuBackend::~CpuBackend() = default;

DeviceBuffer CpuBackend::allocate(int64_t size) {
  size_t bytes =
      (static_cast<size_t>(std::max<int64_t>(size, 1)) + 63) / 64 * 64;
  char *p = static_cast<char *>(std::aligned_alloc(64, bytes));
  if (!p)
    throw BundleError(name_ + ": cannot allocate " + std::to_string(bytes) +
                      " bytes");
  std::memset(p, 0, bytes);
  return DeviceBuffer(p, freeAligned);
}

void CpuBackend::copyToDevice(char *dst, const void *src, int64_t bytes) {
  parallelCopy(dst, src, bytes);
}

void CpuBackend::copyToHost(void *dst, const char *src, int64_t bytes) {
  parallelCopy(dst, src, bytes);
}

void CpuBackend::copyOnDevice(char *dst, const char *src, int64_t bytes) {
  parallelCopy(dst, src, bytes);
}

void CpuBackend::accumulate(float *dst, const float *src, int64_t count) {
  parallelAccumulate(dst, src, count);
}

void CpuBackend::roundToBf16(char *dst, const char *src, int64_t count) {
  // oneDNN's own conversion, the one the bfloat16 products' operand
  // reorders run (a denormal becomes a zero of its sign where the CPU's
  // conversion instruction does so): the products then read the same
  // bfloat16 values from a kept copy as from the float32 tensor.
  using dnnl::memory;
  memory::desc from({count}, memory::data_type::f32, memory::format_tag::a),
      to({count}, memory::data_type::bf16, memory::format_tag::a);
  memory source(from, dnn->engine, const_cast<char *>(src));
  memory target(to, dnn->engine, dst);
  auto it = dnn->toBf16.find(count);
  if (it == dnn->toBf16.end())
    it = dnn->toBf16.emplace(count, dnnl::reorder(source, target)).first;
  it->second.execute(dnn->stream, source, target);
  dnn->stream.wait();
}

void CpuBackend::widenBf16(char *dst, const char *src, int64_t count) {
  parallelWidenBf16(reinterpret_cast<float *>(dst),
                    reinterpret_cast<const uint16_t *>(src), count);
}

std::unique_ptr<StageCode> CpuBackend::loadCode(const Bundle &bundle,
                                                const StageSpec &stage) {
  if (stage.deviceCode && !stage.deviceCode->kernels.empty())
    throw BundleError(bundle.path + ": stage " + std::to_string(stage.index) +
                      " was compiled for a GPU (" + stage.deviceCode->arch +
                      "), not for " + name_);
  return std::make_unique<NativeLibrary>(bundle.partPath(stage.library));
}

std::unique_ptr<Kernel> CpuBackend::createKernel(const KernelSpec &spec,
                                                 const KernelMemory &memory) {
  KernelFactory create = findKernelFactory(spec.kind);
  if (!create)
    spec.fail("the CPU backend has no kernel of this kind");
  try {
    return create(spec, memory, *dnn);
  } catch (const dnnl::error &e) {
    spec.fail(std::string("oneDNN cannot create it: ") + e.what());
  }
}

bool CpuBackend::canAccumulate(const KernelSpec &spec) const {
  // oneDNN's products add into their result by a sum post-op (productAttr
  // in kernels/Matmul.cpp); a gemm's scale or addend runs after the
  // product, on the host, and would scale the sum too.
  if (spec.results.size() != 1 || spec.results[0].dtype != DType::F32)
    return false;
  if (spec.kind == "matmul")
    return true;
  return spec.kind == "gemm" && spec.number("alpha") == 1.0 &&
         !spec.optionalOperand("c");
}

void CpuBackend::synchronize() { dnn->stream.wait(); }

int64_t CpuBackend::kernelBytes() const {
  return dnn->keptBytes + static_cast<int64_t>(dnn->workspace.residentBytes());
}

} // namespace gpipe::runtime::cpu
