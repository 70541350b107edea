// Matrix products: gemm (with ONNX's alpha, beta, transposes and bias) and
// NumPy-style batched matmul, on oneDNN's matmul primitive.
#include "Families.h"

#include <algorithm>
#include <optional>

namespace gpipe::runtime::cpu {

namespace {

/// The primitives' attributes for `spec`: the device's, and where the
/// runtime asks the product to add into its result (the number
/// "accumulate": a weight gradient summed over the step's micro-batches
/// where the optimizer reads it) a sum post-op: dst = product + dst, the
/// product rounded to float32 first as when it is written apart and added
/// (CpuBackend::canAccumulate).
dnnl::primitive_attr productAttr(const KernelSpec &spec, const OneDnn &dnn) {
  auto found = spec.numbers.find("accumulate");
  if (found == spec.numbers.end() || found->second.empty() ||
      found->second[0] == 0)
    return dnn.attr;
  // A handle: a copy of dnn.attr is the device's own, which every kernel
  // made after would take the post-op from. A new one, as it is made.
  dnnl::primitive_attr attr = userScratchpad();
  dnnl::post_ops ops;
  ops.append_sum(1.0f);
  attr.set_post_ops(ops);
  return attr;
}

/// A product's operand: its float32 memory (plain or strided) and the
/// tensor it views (a parameter's converted copy is kept per version).
struct ProductOperand {
  memory plain;
  const TensorSlot *slot;
};

/// True where `operand` is a parameter (a training weight with its
/// version, or an inference weight that never changes).
bool isParam(const KernelMemory &mem, const ProductOperand &operand) {
  return mem.constantOf(*operand.slot) || mem.versionOf(*operand.slot);
}

/// The layout a bfloat16 product reads `operand` in: a parameter in its
/// own element order (the device's one bfloat16 copy of it, which the
/// forward and the input gradient share, OneDnn::bf16Param), anything else
/// in the layout oneDNN chooses (rounded into it before each run).
memory::desc bf16Layout(const KernelMemory &mem,
                        const ProductOperand &operand) {
  return isParam(mem, operand)
             ? sameLayout(operand.plain.get_desc(), memory::data_type::bf16)
             : anyLayout(operand.plain, memory::data_type::bf16);
}

void bindBf16Operand(ReorderedKernel &kernel, int arg, OneDnn &dnn,
                     const KernelMemory &mem, const ProductOperand &operand,
                     const memory::desc &chosen) {
  const TensorSlot &slot = *operand.slot;
  if (!isParam(mem, operand)) {
    kernel.bind(arg, operand.plain, chosen, false);
    return;
  }
  int64_t elements = 1;
  for (int64_t d : slot.shape)
    elements *= d;
  kernel.bindBf16Param(arg, chosen,
                       dnn.bf16Param(mem.address(slot), elements,
                                     mem.constantOf(slot),
                                     mem.versionOf(slot)));
}

/// dst = src weights (+ bias) multiplied in bfloat16, summed in float32:
/// activations rounded into oneDNN's chosen bfloat16 layouts before each
/// run (in the device's workspace), a parameter read from the device's
/// bfloat16 copy of it (converted once per version), the float32 result
/// written in place. The bias stays float32, added by the primitive.
std::unique_ptr<ReorderedKernel>
bf16Product(const KernelSpec &spec, OneDnn &dnn, const KernelMemory &mem,
            const ProductOperand &src, const ProductOperand &weights,
            const std::optional<memory> &bias, const memory &dst) {
  memory::desc srcDesc = bf16Layout(mem, src),
               weightsDesc = bf16Layout(mem, weights);
  std::optional<dnnl::matmul::primitive_desc> pd;
  try {
    pd.emplace(bias ? dnnl::matmul::desc(srcDesc, weightsDesc, bias->get_desc(),
                                         dst.get_desc())
                    : dnnl::matmul::desc(srcDesc, weightsDesc, dst.get_desc()),
               productAttr(spec, dnn), dnn.engine);
  } catch (const dnnl::error &e) {
    spec.fail(std::string("oneDNN has no bfloat16 product of these shapes on "
                          "this CPU (") +
              e.what() + "): compile the model with --precision=fp32");
  }
  auto kernel = std::make_unique<ReorderedKernel>(dnn, dnnl::matmul(*pd));
  bindBf16Operand(*kernel, DNNL_ARG_SRC, dnn, mem, src, pd->src_desc());
  bindBf16Operand(*kernel, DNNL_ARG_WEIGHTS, dnn, mem, weights,
                  pd->weights_desc());
  if (bias)
    kernel->bind(DNNL_ARG_BIAS, *bias, bias->get_desc(), false);
  kernel->bind(DNNL_ARG_DST, dst, pd->dst_desc(), true);
  return kernel;
}

std::unique_ptr<Kernel> createMatmul(const KernelSpec &spec,
                                     const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &a = spec.operand("lhs"), &b = spec.operand("rhs");
  const TensorSlot &out = spec.result("output");
  std::vector<int64_t> l = a.shape, r = b.shape;
  if (l.size() == 1)
    l.insert(l.begin(), 1);
  if (r.size() == 1)
    r.push_back(1);
  size_t rank = std::max(l.size(), r.size());
  dims ld = padLeft(l, rank), rd = padLeft(r, rank), od(rank);
  for (size_t i = 0; i + 2 < rank; ++i)
    od[i] = std::max(ld[i], rd[i]);
  od[rank - 2] = ld[rank - 2];
  od[rank - 1] = rd[rank - 1];
  // One right-hand matrix for every batch (a Linear layer's weights on
  // [B, T, D] activations): the batches are rows of one product. oneDNN
  // would otherwise read (and pack) the weights once per batch: 3.6x the
  // time of [32, 1024] x [1024, 4096] as [4, 8, 1024] x [1, 1024, 4096].
  if (rank > 2 &&
      std::all_of(rd.begin(), rd.end() - 2, [](int64_t d) { return d == 1; })) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < rank; ++i)
      rows *= ld[i];
    ld = {rows, ld[rank - 1]};
    rd = {rd[rank - 2], rd[rank - 1]};
    od = {rows, od[rank - 1]};
  }
  memory src = bindSlot(spec, a, mem, dnn, ld);
  memory weights = bindSlot(spec, b, mem, dnn, rd);
  memory dst = bindSlot(spec, out, mem, dnn, od);
  if (productType(spec) == memory::data_type::bf16)
    return bf16Product(spec, dnn, mem, {src, &a}, {weights, &b}, std::nullopt,
                       dst);
  dnnl::matmul::desc desc(src.get_desc(), weights.get_desc(), dst.get_desc());
  dnnl::matmul::primitive_desc pd(desc, productAttr(spec, dnn), dnn.engine);
  return std::make_unique<PrimitiveKernel>(
      dnn, dnnl::matmul(pd),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_WEIGHTS, weights},
                                      {DNNL_ARG_DST, dst}});
}

/// A product whose left operand, stored [k, m], is read transposed (a
/// weight gradient: the stored activation's transpose times the output
/// gradient). oneDNN's gemm packs it along its strides; when a row of it
/// is a multiple of 4 KiB (m a multiple of 1024), every row falls into
/// the same set of a 32 or 48 KiB L1 cache (4 KiB a way), and the packing
/// reads miss: a GPT's fc weight gradient, [1024, 512] x [512, 256], ran
/// at 31 GFLOP/s on an AVX2 core where its other products ran at 65 to 75.
/// The operand is first copied row-major by a oneDNN reorder (0.25 ms for
/// that operand on one core, where a loop over 32 x 32 tiles took 1.45),
/// then multiplied as a plain product.
class TransposedLhsGemm : public Kernel {
public:
  TransposedLhsGemm(OneDnn &dnn, dnnl::matmul primitive, memory a,
                    memory weights, memory dst)
      : dnn(dnn), primitive(std::move(primitive)), a(a),
        copy(buffers.addMemory(plainDesc(a.get_desc().dims()), dnn.engine)),
        reorder(a, copy), args{{DNNL_ARG_SRC, copy},
                               {DNNL_ARG_WEIGHTS, std::move(weights)},
                               {DNNL_ARG_DST, std::move(dst)}} {
    buffers.addScratchpad(this->primitive, dnn.engine, args);
    dnn.workspace.reserve(buffers.bytes());
  }
  void run() override {
    // In the device's workspace, which may have grown: bound at run.
    buffers.bind(dnn.workspace);
    reorder.execute(dnn.stream, a, copy);
    primitive.execute(dnn.stream, args);
    dnn.stream.wait();
  }

private:
  OneDnn &dnn;
  dnnl::matmul primitive;
  ScratchLayout buffers;
  memory a, copy;
  dnnl::reorder reorder;
  std::unordered_map<int, memory> args;
};

/// Where oneDNN's kernels are AVX-512's (avx512Kernels) the strided product
/// measured faster than the copy and the plain one (a 2-core Xeon, one
/// core: [1024, 512] x [512, 256] 1.71 against 0.25 + 1.57 ms,
/// [3072, 2048] x [2048, 768] 64.2 against 8.8 + 65.2 ms); with the same
/// core limited to AVX2 the two were even (3.21 against 3.17 ms), on an
/// AMD AVX2 core the copy halved the product's time.
std::unique_ptr<Kernel> createGemm(const KernelSpec &spec,
                                   const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &a = spec.operand("a"), &b = spec.operand("b");
  const TensorSlot *c = spec.optionalOperand("c");
  const TensorSlot &out = spec.result("output");
  if (a.shape.size() != 2 || b.shape.size() != 2 || out.shape.size() != 2)
    spec.fail("operands must be 2-D");
  bool transA = spec.flag("trans_a");
  bool transB = spec.flag("trans_b");
  float alpha = static_cast<float>(spec.number("alpha"));
  float beta = static_cast<float>(spec.number("beta"));
  int64_t m = out.shape.at(0), n = out.shape.at(1);
  int64_t k = transA ? a.shape.at(0) : a.shape.at(1);
  // Transposed operands are read in place through their strides.
  memory::desc srcDesc(dims{m, k}, memory::data_type::f32,
                       transA ? dims{1, m} : dims{k, 1});
  memory::desc weightsDesc(dims{k, n}, memory::data_type::f32,
                           transB ? dims{1, k} : dims{n, 1});
  memory src(srcDesc, dnn.engine, mem.address(a));
  memory weights(weightsDesc, dnn.engine, mem.address(b));
  memory dst = bindSlot(spec, out, mem, dnn);
  if (a.dtype != DType::F32 || b.dtype != DType::F32)
    spec.fail("only float32 kernels are implemented");
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (c && c->dtype != DType::F32)
    spec.fail("only float32 kernels are implemented");
  // alpha op(A) op(B) + beta C where C is not a bias the primitive adds:
  // scaled and added on the host after the product.
  std::function<void()> epilogue;
  bool biasByPrimitive = c && alpha == 1.0f && beta == 1.0f;
  if (alpha != 1.0f || (c && !biasByPrimitive)) {
    float *d = reinterpret_cast<float *>(mem.address(out));
    const float *cData =
        c ? reinterpret_cast<const float *>(mem.address(*c)) : nullptr;
    dims cShape = c ? padLeft(c->shape, 2) : dims{1, 1};
    epilogue = [=] {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float v = alpha * d[i * n + j];
          if (cData)
            v += beta * cData[(cShape[0] == 1 ? 0 : i) * cShape[1] +
                              (cShape[1] == 1 ? 0 : j)];
          d[i * n + j] = v;
        }
    };
  }
  if (productType(spec) == memory::data_type::bf16) {
    std::optional<memory> bias;
    if (biasByPrimitive)
      bias = bindSlot(spec, *c, mem, dnn, padLeft(c->shape, 2));
    std::unique_ptr<ReorderedKernel> kernel =
        bf16Product(spec, dnn, mem, {src, &a}, {weights, &b}, bias, dst);
    kernel->setEpilogue(std::move(epilogue));
    return kernel;
  }
  if (biasByPrimitive) {
    // The common case: C is a bias added by the primitive.
    memory bias = bindSlot(spec, *c, mem, dnn, padLeft(c->shape, 2));
    dnnl::matmul::desc desc(srcDesc, weightsDesc, bias.get_desc(),
                            dst.get_desc());
    dnnl::matmul::primitive_desc pd(desc, productAttr(spec, dnn), dnn.engine);
    args[DNNL_ARG_BIAS] = bias;
    return std::make_unique<PrimitiveKernel>(dnn, dnnl::matmul(pd), args);
  }
  // The copy reads and writes m k floats once and the product makes
  // 2 m k n FLOPs: at a copy near 10 GB/s and products near 60 GFLOP/s
  // the copy costs about 24 / n of the product's time, under a fifth from
  // n = 128, against the half the product loses at such strides. (At
  // other strides the copy measured no gain or a loss: rows of 3 KiB
  // spread over the cache's sets.) Not where the kernels are AVX-512's
  // (avx512Kernels).
  if (transA && alpha == 1.0f && !c && m % 1024 == 0 && n >= 128 &&
      !avx512Kernels()) {
    dnnl::matmul::desc desc(plainDesc({m, k}), weightsDesc, dst.get_desc());
    dnnl::matmul::primitive_desc pd(desc, productAttr(spec, dnn), dnn.engine);
    return std::make_unique<TransposedLhsGemm>(dnn, dnnl::matmul(pd), src,
                                               weights, dst);
  }
  dnnl::matmul::desc desc(srcDesc, weightsDesc, dst.get_desc());
  dnnl::matmul::primitive_desc pd(desc, productAttr(spec, dnn), dnn.engine);
  return std::make_unique<PrimitiveKernel>(dnn, dnnl::matmul(pd), args,
                                           epilogue);
}

} // namespace

std::vector<KernelFactoryEntry> matmulKernels() {
  return {{"gemm", createGemm}, {"matmul", createMatmul}};
}

} // namespace gpipe::runtime::cpu
