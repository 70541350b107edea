#include "OneDnn.h"

#include "gpipe/runtime/RuntimeInfo.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace gpipe::runtime::cpu {

namespace {
dims rowMajorStrides(const dims &shape) {
  dims strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  return strides;
}
} // namespace

char *Workspace::data() {
  if (allocated < reserved) {
    size_t bytes = (reserved + 63) / 64 * 64;
    buffer.reset(static_cast<char *>(std::aligned_alloc(64, bytes)));
    if (!buffer)
      throw std::runtime_error("cannot allocate the kernels' workspace of " +
                               std::to_string(bytes) + " bytes");
    allocated = reserved;
  }
  return buffer.get();
}

size_t Workspace::residentBytes() const {
  if (!buffer || allocated == 0)
    return 0;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto start = reinterpret_cast<uintptr_t>(buffer.get());
  uintptr_t first = start / page * page, end = start + allocated;
  size_t pages = (end - first + page - 1) / page;
  std::vector<unsigned char> in(pages);
  if (mincore(reinterpret_cast<void *>(first), end - first, in.data()) != 0)
    return allocated; // not known: all of it
  size_t resident = 0;
  for (unsigned char p : in)
    resident += p & 1;
  return std::min(allocated, resident * page);
}

size_t ScratchLayout::add(size_t bytes) {
  size_t at = bytes_;
  bytes_ += (bytes + 63) / 64 * 64;
  return at;
}

memory ScratchLayout::addMemory(const memory::desc &desc,
                                const dnnl::engine &engine) {
  memory m(desc, engine, nullptr);
  memories.emplace_back(m, add(desc.get_size()));
  return m;
}

char *ScratchLayout::bind(Workspace &workspace) {
  char *base = workspace.data();
  for (auto &[m, at] : memories)
    m.set_data_handle(base + at);
  return base;
}

void ConvertedParam::refresh(dnnl::stream &stream) {
  if (valid && (constant || !version || converted == *version))
    return;
  if (!op)
    op = dnnl::reorder(from, to);
  op.execute(stream, from, to);
  converted = version ? *version : 0;
  valid = true;
}

std::shared_ptr<ConvertedParam>
OneDnn::convertedParam(const memory &from, const memory::desc &to,
                       bool constant, const uint64_t *version) {
  for (const auto &c : converted)
    if (c->from.get_data_handle() == from.get_data_handle() &&
        c->from.get_desc() == from.get_desc() && c->to.get_desc() == to &&
        c->constant == constant && c->version == version)
      return c;
  auto c = std::make_shared<ConvertedParam>();
  c->from = from;
  c->to = memory(to, engine);
  c->constant = constant;
  c->version = version;
  // A parameter's bfloat16 copies are in the stage's memory plan (the
  // compiler's bf16CopyBytes); the other layouts are the kernels' own.
  if (to.data.data_type != dnnl_bf16)
    keptBytes += static_cast<int64_t>(to.get_size());
  converted.push_back(c);
  return c;
}

std::shared_ptr<ConvertedParam> OneDnn::bf16Param(void *address,
                                                  int64_t elements,
                                                  bool constant,
                                                  const uint64_t *version) {
  memory from(memory::desc({elements}, memory::data_type::f32, dims{1}), engine,
              address);
  return convertedParam(
      from, memory::desc({elements}, memory::data_type::bf16, dims{1}),
      constant, version);
}

memory::desc plainDesc(const dims &shape) {
  return memory::desc(shape, memory::data_type::f32, rowMajorStrides(shape));
}

memory bindSlot(const KernelSpec &spec, const TensorSlot &slot,
                const KernelMemory &mem, OneDnn &dnn, const dims &shape) {
  if (slot.dtype != DType::F32)
    spec.fail("element type " + std::string(dtypeName(slot.dtype)) +
              " (only float32 kernels are implemented)");
  dims d = shape.empty() ? dims(slot.shape) : shape;
  return memory(plainDesc(d), dnn.engine, mem.address(slot));
}

bool avx512Kernels() {
  auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

memory::desc anyLayout(const memory &m) {
  return memory::desc(m.get_desc().dims(), memory::data_type::f32,
                      memory::format_tag::any);
}

memory::desc anyLayout(const memory &m, memory::data_type type) {
  return memory::desc(m.get_desc().dims(), type, memory::format_tag::any);
}

memory::desc sameLayout(const memory::desc &desc, memory::data_type type) {
  const dnnl_memory_desc_t &c = desc.data;
  if (c.format_kind != dnnl_blocked || c.format_desc.blocking.inner_nblks != 0)
    throw std::logic_error("sameLayout: not a plain or strided layout");
  dims strides(c.format_desc.blocking.strides,
               c.format_desc.blocking.strides + c.ndims);
  return memory::desc(desc.dims(), type, strides);
}

memory::data_type productType(const KernelSpec &spec) {
  auto it = spec.strings.find("compute_type");
  std::string type = it == spec.strings.end() ? "f32" : it->second;
  if (type == "f32")
    return memory::data_type::f32;
  if (type != "bf16")
    spec.fail("compute_type '" + type +
              "' is not one the CPU backend knows "
              "(f32 or bf16)");
  if (!cpuMultipliesBf16())
    spec.fail("multiplies in bfloat16 (--precision=bf16), which oneDNN "
              "computes only on CPUs with AVX-512, and this one has none: "
              "compile the model with --precision=fp32");
  return memory::data_type::bf16;
}

memory zeroShift(const memory::desc &desc, OneDnn &dnn) {
  memory shift(desc, dnn.engine);
  dnn.keptBytes += static_cast<int64_t>(desc.get_size());
  std::memset(shift.get_data_handle(), 0, desc.get_size());
  return shift;
}

dims padLeft(const std::vector<int64_t> &shape, size_t rank) {
  dims d(rank - shape.size(), 1);
  d.insert(d.end(), shape.begin(), shape.end());
  return d;
}

void needEntries(const KernelSpec &spec, const std::string &key, size_t size) {
  if (spec.ints(key).size() != size)
    spec.fail("attribute '" + key + "' must have " + std::to_string(size) +
              " entries");
}

Window2d window2d(const KernelSpec &spec) {
  std::vector<int64_t> s = spec.ints("strides"), p = spec.ints("pads"),
                       d = spec.ints("dilations");
  return {s[0], s[1], p[0], p[1], d[0], d[1]};
}

dnnl::primitive_attr userScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void ScratchLayout::addScratchpad(const dnnl::primitive &primitive,
                                  const dnnl::engine &engine,
                                  std::unordered_map<int, memory> &args) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(
      primitive.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  if (!md || md->ndims == 0)
    return;
  memory::desc desc(*md);
  if (desc.get_size() != 0)
    args[DNNL_ARG_SCRATCHPAD] = addMemory(desc, engine);
}

PrimitiveKernel::PrimitiveKernel(OneDnn &dnn, dnnl::primitive primitive,
                                 std::unordered_map<int, memory> args,
                                 std::function<void()> epilogue)
    : dnn(dnn), primitive(std::move(primitive)), args(std::move(args)),
      epilogue(std::move(epilogue)) {
  scratch.addScratchpad(this->primitive, dnn.engine, this->args);
  dnn.workspace.reserve(scratch.bytes());
}

void PrimitiveKernel::run() {
  scratch.bind(dnn.workspace);
  primitive.execute(dnn.stream, args);
  dnn.stream.wait();
  if (epilogue)
    epilogue();
}

ReorderedKernel::ReorderedKernel(OneDnn &dnn, dnnl::primitive primitive)
    : dnn(dnn), primitive(std::move(primitive)) {
  scratch.addScratchpad(this->primitive, dnn.engine, args);
  dnn.workspace.reserve(scratch.bytes());
}

void ReorderedKernel::bind(int arg, const memory &plain,
                           const memory::desc &chosen, bool output,
                           bool constant, const uint64_t *version) {
  if (plain.get_desc() == chosen) {
    args[arg] = plain;
    return;
  }
  if (!output && (constant || version)) {
    params.push_back(dnn.convertedParam(plain, chosen, constant, version));
    args[arg] = params.back()->to;
    return;
  }
  memory inner = scratch.addMemory(chosen, dnn.engine);
  dnn.workspace.reserve(scratch.bytes());
  args[arg] = inner;
  if (output)
    after.emplace_back(inner, plain);
  else
    before.emplace_back(plain, inner);
}

void ReorderedKernel::bindBf16Param(int arg, const memory::desc &view,
                                    std::shared_ptr<ConvertedParam> param) {
  args[arg] = memory(view, dnn.engine, param->to.get_data_handle());
  params.push_back(std::move(param));
}

void ReorderedKernel::run() {
  scratch.bind(dnn.workspace);
  for (auto &param : params)
    param->refresh(dnn.stream);
  for (LayoutCopy &copy : before)
    copy.run(dnn.stream);
  primitive.execute(dnn.stream, args);
  for (LayoutCopy &copy : after)
    copy.run(dnn.stream);
  dnn.stream.wait();
  if (epilogue)
    epilogue();
}

void sgemm(const char *kind, char ta, char tb, int64_t m, int64_t n, int64_t k,
           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
           float *c, int64_t ldc) {
  dnnl_status_t status =
      dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw std::runtime_error(std::string(kind) +
                             ": oneDNN's sgemm failed (status " +
                             std::to_string(static_cast<int>(status)) + ")");
}

} // namespace gpipe::runtime::cpu
