// What the CPU backend's kernels share: the oneDNN engine and stream of a
// device, tensor bindings and the two ways a primitive is run. Private to
// runtime/lib/cpu.
#ifndef GPIPE_RUNTIME_CPU_KERNELS_ONEDNN_H
#define GPIPE_RUNTIME_CPU_KERNELS_ONEDNN_H

#include "DeviceBackend.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpipe::runtime::cpu {

using dnnl::memory;
using dims = memory::dims;

/// Memory that a device's kernels need only while they run (arena
/// tensors in oneDNN's layouts, patches of convolutions, row-major copies
/// of transposed operands): a stage's kernels run one at a time on its
/// thread, so they share one buffer, as large as the largest kernel asks.
/// Kernels reserve their part when they are created; the buffer is
/// allocated at its final size on first use. It had been a buffer per
/// kernel and per phase: a recompute phase's convolutions added their own,
/// so recomputing raised the process's memory while it lowered the plan.
class Workspace {
public:
  void reserve(size_t bytes) { reserved = std::max(reserved, bytes); }
  /// The buffer (64-byte aligned), grown to the largest reservation.
  char *data();
  size_t size() const { return reserved; }
  /// The bytes of the buffer in memory (mincore): its pages the kernels
  /// have touched. A kernel may reserve more than it writes (a primitive's
  /// scratchpad sized for the worst case): the process holds what it
  /// touched.
  size_t residentBytes() const;

private:
  size_t reserved = 0, allocated = 0;
  std::unique_ptr<char, void (*)(void *)> buffer{nullptr, std::free};
};

/// A kernel's part of its device's Workspace, laid out when the kernel is
/// created: buffers at 64-byte aligned offsets from the part's start, and
/// oneDNN memories pointed at theirs before each run.
class ScratchLayout {
public:
  /// Room for `bytes`; its offset from the part's start.
  size_t add(size_t bytes);
  /// A oneDNN memory of `desc` in the part (its handle set by bind()).
  memory addMemory(const memory::desc &desc, const dnnl::engine &engine);
  size_t bytes() const { return bytes_; }
  /// Room for `primitive`'s scratchpad, if it needs one, bound to `args`
  /// as DNNL_ARG_SCRATCHPAD. The backend's primitives are created with
  /// OneDnn::attr (a scratchpad the caller provides), so what oneDNN needs
  /// while a primitive runs is a part of the device's workspace, shared
  /// and counted, instead of memory the library keeps to itself.
  void addScratchpad(const dnnl::primitive &primitive,
                     const dnnl::engine &engine,
                     std::unordered_map<int, memory> &args);
  /// The part's start in `workspace`, its memories pointed into it; to be
  /// called before each run (the buffer may have grown since the last).
  char *bind(Workspace &workspace);

private:
  size_t bytes_ = 0;
  std::vector<std::pair<memory, size_t>> memories;
};

/// A copy of a tensor from one layout into another, its oneDNN reorder
/// made once (the memories' addresses may change between runs, their
/// layouts do not).
struct LayoutCopy {
  LayoutCopy(const memory &from, const memory &to)
      : from(from), to(to), op(from, to) {}
  void run(dnnl::stream &stream) { op.execute(stream, from, to); }
  memory from, to;
  dnnl::reorder op;
};

/// A parameter converted to a kernel's layout (oneDNN's blocked weights),
/// shared by the kernels of the device that read it in that layout (a
/// convolution of the forward phase and of the recompute phase); converted
/// again when the parameter's version changes, or once if it is constant
/// (inference).
struct ConvertedParam {
  memory from, to;
  bool constant = false;
  const uint64_t *version = nullptr;
  uint64_t converted = 0;
  bool valid = false;
  /// The conversion, made on the first refresh.
  dnnl::reorder op;
  /// Converts `from` into `to` if `to` is stale (queued on `stream`).
  void refresh(dnnl::stream &stream);
};

/// Primitive attributes asking for a scratchpad from the caller.
dnnl::primitive_attr userScratchpad();

/// A CPU device's oneDNN objects: kernels are created on the engine and
/// run on the stream; the memory they hold beyond the stage's arenas and
/// parameters is the workspace and the kept bytes.
struct OneDnn {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  /// What every primitive of the device is created with: a scratchpad the
  /// kernel provides (ScratchLayout::addScratchpad).
  const dnnl::primitive_attr attr = userScratchpad();
  Workspace workspace;
  /// Bytes kernels keep between runs beyond the stages' memory plan:
  /// parameters converted to float32 layouts (a parameter's bfloat16
  /// copies are in the plan), gathered weights, saved statistics.
  int64_t keptBytes = 0;
  /// The stash's float32-to-bfloat16 reorders, by element count
  /// (CpuBackend::roundToBf16: one per kept tensor's size, made once).
  std::map<int64_t, dnnl::reorder> toBf16;
  /// `from` in layout `to`: the device's copy if a kernel made one, else a
  /// new one (counted in keptBytes unless bfloat16).
  std::shared_ptr<ConvertedParam> convertedParam(const memory &from,
                                                 const memory::desc &to,
                                                 bool constant,
                                                 const uint64_t *version);
  /// The parameter tensor of `elements` floats at `address` rounded to
  /// bfloat16 in its own element order: one copy a device, converted once
  /// a version, which every bfloat16 product reads through its own view
  /// (a Linear layer's forward as [in, out] transposed, its input gradient
  /// as [out, in]). A blocked copy per layout cost a 0.65 ms reorder of a
  /// 1024x1024 weight each, this one 0.11 (2 cores, AVX512_BF16); the
  /// product reading the plain layout repacks its panels, 0.035-0.065 ms a
  /// run more (docs/training.md).
  std::shared_ptr<ConvertedParam> bf16Param(void *address, int64_t elements,
                                            bool constant,
                                            const uint64_t *version);
  /// A copy of a parameter that a kernel family makes its own way (a
  /// convolution's weights of the taps that read), shared by the kernels
  /// that ask with the same `key`: the existing one, else `make()`'s.
  template <class T, class Make>
  std::shared_ptr<T> sharedCopy(const std::string &key, Make make) {
    std::shared_ptr<void> &slot = copies[key];
    if (!slot)
      slot = make();
    return std::static_pointer_cast<T>(slot);
  }

private:
  std::vector<std::shared_ptr<ConvertedParam>> converted;
  std::map<std::string, std::shared_ptr<void>> copies;
};

/// Row-major float32 memory descriptor.
memory::desc plainDesc(const dims &shape);
/// A oneDNN memory over a float32 tensor of the stage, optionally viewed
/// with other dims (same element count, row-major); BundleError for other
/// element types.
memory bindSlot(const KernelSpec &spec, const TensorSlot &slot,
                const KernelMemory &mem, OneDnn &dnn, const dims &shape = {});
/// Row-major C = op(A) op(B) + beta C (op by `ta`, `tb`: 'N' or 'T') with
/// oneDNN's sgemm; `kind` names the kernel in the error.
void sgemm(const char *kind, char ta, char tb, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
           float *c, int64_t ldc);
/// Whether the kernels oneDNN runs here are AVX-512's (its effective
/// instruction set: the CPU's, or the cap ONEDNN_MAX_CPU_ISA sets).
bool avx512Kernels();
/// `m`'s dims with the layout left to the primitive (oneDNN's blocked ones),
/// in float32 or in `type`.
memory::desc anyLayout(const memory &m);
memory::desc anyLayout(const memory &m, memory::data_type type);
/// `desc`'s dims and strides (a plain or strided layout) in `type`.
memory::desc sameLayout(const memory::desc &desc, memory::data_type type);
/// The type a product's operands are multiplied in (the kernel's
/// "compute_type", nn's ComputeTypeOpInterface): f32, or bf16 (products
/// summed in float32 by oneDNN's bfloat16 kernels). BundleError for a type
/// the backend does not know, and for bf16 on a CPU whose oneDNN kernels
/// have no bfloat16 (below AVX-512), saying what to do.
memory::data_type productType(const KernelSpec &spec);
/// Zeros in the layout of a normalization's scale/shift: the shift changes
/// neither the statistics nor the gradients, and stands in for the one a
/// backward primitive asks for.
memory zeroShift(const memory::desc &desc, OneDnn &dnn);
/// Right-aligns `shape` to `rank` dims with leading 1s.
dims padLeft(const std::vector<int64_t> &shape, size_t rank);
/// Checks that the array attribute `key` has `size` entries.
void needEntries(const KernelSpec &spec, const std::string &key, size_t size);

/// A 2-D window's strides, leading pads and dilations as ONNX gives them
/// (the attributes "strides", "pads", "dilations"): what the backend's own
/// convolution and pooling loops read.
struct Window2d {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};
Window2d window2d(const KernelSpec &spec);

/// The floats of `slot` in the kernel's memory.
inline float *floats(const KernelMemory &mem, const TensorSlot &slot) {
  return reinterpret_cast<float *>(mem.address(slot));
}

/// A primitive with its arguments, run as is, then an optional epilogue on
/// the host.
class PrimitiveKernel : public Kernel {
public:
  PrimitiveKernel(OneDnn &dnn, dnnl::primitive primitive,
                  std::unordered_map<int, memory> args,
                  std::function<void()> epilogue = nullptr);
  void run() override;

private:
  OneDnn &dnn;
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  std::function<void()> epilogue;
  ScratchLayout scratch;
};

/// A primitive that works in the layouts it chose (blocked, for speed):
/// plain tensors of the arena are reordered into them before it runs and
/// its results back after.
class ReorderedKernel : public Kernel {
public:
  ReorderedKernel(OneDnn &dnn, dnnl::primitive primitive);
  /// Binds `arg` to `plain`, through a buffer of layout `chosen` if it
  /// differs (in the device's workspace); `output` arguments are copied
  /// back to `plain` after a run. A `constant` input (inference weights)
  /// is converted on the first run only, one with a `version` (training
  /// weights) on the first run after the version changed, in a copy the
  /// device's kernels share (OneDnn::convertedParam).
  void bind(int arg, const memory &plain, const memory::desc &chosen,
            bool output, bool constant = false,
            const uint64_t *version = nullptr);
  /// Binds `arg` to `view`, a bfloat16 layout over `param`'s element
  /// order (OneDnn::bf16Param), refreshed before each run.
  void bindBf16Param(int arg, const memory::desc &view,
                     std::shared_ptr<ConvertedParam> param);
  /// Runs `f` on the host after the results are copied back.
  void setEpilogue(std::function<void()> f) { epilogue = std::move(f); }
  void run() override;

private:
  OneDnn &dnn;
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  ScratchLayout scratch;
  std::vector<LayoutCopy> before, after;
  std::function<void()> epilogue;
  std::vector<std::shared_ptr<ConvertedParam>> params;
};

/// How a kernel kind is created on a CPU device.
using KernelFactory = std::unique_ptr<Kernel> (*)(const KernelSpec &,
                                                  const KernelMemory &,
                                                  OneDnn &);
struct KernelFactoryEntry {
  const char *kind;
  KernelFactory create;
};

} // namespace gpipe::runtime::cpu

#endif // GPIPE_RUNTIME_CPU_KERNELS_ONEDNN_H
