// Max, average and global average pooling and their gradients: 2-D max
// pooling as the backend's own loops over plain maps, the rest on oneDNN's
// pooling primitives.
#include "Families.h"

#include "ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace gpipe::runtime::cpu {

namespace {

/// Checks that the tensors have one rank, at least 3, and that the window
/// attributes of `kind` have one entry per spatial axis.
size_t checkPool(const KernelSpec &spec,
                 std::initializer_list<const TensorSlot *> tensors, bool window,
                 bool dilations) {
  size_t rank = (*tensors.begin())->shape.size();
  for (const TensorSlot *t : tensors)
    if (rank < 3 || t->shape.size() != rank)
      spec.fail("operands must have the same rank, at least 3");
  size_t spatial = rank - 2;
  if (window) {
    needEntries(spec, "kernel_shape", spatial);
    needEntries(spec, "strides", spatial);
    needEntries(spec, "pads", 2 * spatial);
  }
  if (dilations)
    needEntries(spec, "dilations", spatial);
  return spatial;
}

/// The window of a pooling between `in` and `out`, with the right padding
/// widened where ceil_mode windows run past the end (to reach the planned
/// output size).
struct Window {
  dims kernel, strides, dilations, padL, padR;
};
Window poolWindow(const KernelSpec &spec, const TensorSlot &in,
                  const TensorSlot &out, bool hasDilations) {
  size_t spatial = in.shape.size() - 2;
  std::vector<int64_t> k = spec.ints("kernel_shape"), s = spec.ints("strides"),
                       p = spec.ints("pads");
  std::vector<int64_t> d =
      hasDilations ? spec.ints("dilations") : std::vector<int64_t>(spatial, 1);
  Window w;
  w.kernel.assign(k.begin(), k.end());
  w.strides.assign(s.begin(), s.end());
  w.padL.assign(p.begin(), p.begin() + spatial);
  for (size_t i = 0; i < spatial; ++i) {
    w.dilations.push_back(d[i] - 1);
    int64_t extent = (k[i] - 1) * d[i] + 1;
    w.padR.push_back((out.shape[i + 2] - 1) * s[i] + extent - in.shape[i + 2] -
                     p[i]);
  }
  return w;
}

dnnl::algorithm averaging(const KernelSpec &spec) {
  return spec.flag("count_include_pad")
             ? dnnl::algorithm::pooling_avg_include_padding
             : dnnl::algorithm::pooling_avg_exclude_padding;
}

/// The layouts with channels in blocks of 16 and of 8 of a tensor of
/// `rank` dims (N, C, spatial...).
std::vector<memory::format_tag> blockedLayouts(size_t rank) {
  using tag = memory::format_tag;
  switch (rank) {
  case 3:
    return {tag::nCw16c, tag::nCw8c};
  case 4:
    return {tag::nChw16c, tag::nChw8c};
  case 5:
    return {tag::nCdhw16c, tag::nCdhw8c};
  default:
    return {};
  }
}

memory::desc inLayout(const memory &m, memory::format_tag layout) {
  return memory::desc(m.get_desc().dims(), memory::data_type::f32, layout);
}

/// Whether oneDNN runs `pd` with generated code: on plain (NCHW) tensors
/// its pooling is a reference loop, about ten times slower than a jit
/// pooling on channel blocks with the reorders around it.
bool isJit(const dnnl::primitive_desc_base &pd) {
  return std::string(pd.impl_info_str()).rfind("jit", 0) == 0;
}

/// All ones where `v` replaces `best` under PyTorch's rule (larger, or a
/// NaN), else zero; with the selects below, no branch: on random maps a
/// branch per comparison is mispredicted half the time, and the loops
/// over a few outputs (a 14-wide row) run as scalar code.
inline uint32_t replaces(float v, float best) {
  return 0u - static_cast<uint32_t>((v > best) | (v != v));
}
inline uint32_t bitsOf(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
/// The larger of `v` and `best` under that rule.
inline float larger(float v, float best) {
  uint32_t take = replaces(v, best);
  uint32_t b = (bitsOf(v) & take) | (bitsOf(best) & ~take);
  float out;
  std::memcpy(&out, &b, sizeof out);
  return out;
}
/// `best` and its index `at` replaced by `v` and `i` under that rule.
inline void keepLarger(float v, int32_t i, float &best, int32_t &at) {
  uint32_t take = replaces(v, best);
  at = static_cast<int32_t>((static_cast<uint32_t>(i) & take) |
                            (static_cast<uint32_t>(at) & ~take));
  best = larger(v, best);
}

/// 2-D max pooling of plain (NCHW) tensors and its gradient as loops over
/// each map, where oneDNN pools only channel-blocked layouts at speed: its
/// forward there is two reorders around the pooling, and its gradient
/// reorders three tensors and runs the forward again for the arg-max
/// positions (the first layer of a small CNN, [8, 16, 28, 28]: 0.1 and
/// 0.7 ms on one core, for a pass or two over 400 kB; 0.06-0.1 and
/// 0.16-0.19 ms here; ResNet-18's 3x3 stride-2 padded windows on [32, 64,
/// 16, 16]: 1.2 and 5.0 ms, here 1.4 and 2.9-3.1). Each map is scanned as
/// one run: the maxima over the windows' columns for every row, then over
/// their rows for every output row (a padded copy of the map first where
/// the windows do not tile its rows). The arg-max is
/// PyTorch's: taps scanned row by row, the first largest value, a NaN
/// taken where met (NaN propagates); an output whose taps are all -inf
/// routes its gradient to its first tap. Each map is one thread's, in one
/// order: the gradient of overlapping windows does not depend on the
/// thread count.
class MaxPool2dKernel : public Kernel {
public:
  static bool applies(const TensorSlot &x) {
    return x.shape.size() == 4 && x.dtype == DType::F32 &&
           x.shape[2] * x.shape[3] <= std::numeric_limits<int32_t>::max();
  }

  MaxPool2dKernel(const KernelSpec &spec, const KernelMemory &mem,
                  bool gradient)
      : gradient(gradient), win(window2d(spec)) {
    const TensorSlot &x = spec.operand("input");
    const TensorSlot &y =
        gradient ? spec.operand("grad_output") : spec.result("output");
    input = reinterpret_cast<const float *>(mem.address(x));
    if (gradient) {
      gradOutput = reinterpret_cast<const float *>(mem.address(y));
      gradInput =
          reinterpret_cast<float *>(mem.address(spec.result("grad_input")));
    } else {
      output = reinterpret_cast<float *>(mem.address(y));
    }
    planes = x.shape[0] * x.shape[1];
    h = x.shape[2];
    w = x.shape[3];
    oh = y.shape[2];
    ow = y.shape[3];
    std::vector<int64_t> k = spec.ints("kernel_shape");
    kh = k[0];
    kw = k[1];

    // Where the windows do not tile the map's rows (padding, overlap: the
    // 3x3 windows of stride 2 of ResNet's stem), the map is first copied
    // into one padded with -inf that they tile: rows of ow' win.sw columns,
    // the map at (win.ph, win.pw), ow' >= ow outputs a row (those past ow are
    // computed and dropped), and past the last row the few columns the
    // last dropped outputs read.
    padded = !(win.ph == 0 && win.pw == 0 && w == ow * win.sw &&
               (ow - 1) * win.sw + (kw - 1) * win.dw < w &&
               (oh - 1) * win.sh + (kh - 1) * win.dh < h);
    rowOutputs = ow;
    rows = h;
    if (padded) {
      int64_t span =
          std::max(win.pw + w, (ow - 1) * win.sw + (kw - 1) * win.dw + 1);
      rowOutputs = std::max(ow, (span + win.sw - 1) / win.sw);
      rows = std::max(win.ph + h, (oh - 1) * win.sh + (kh - 1) * win.dh + 1);
    }
    rowWidth = padded ? rowOutputs * win.sw : w;
  }

  void run() override {
    int64_t grain = std::max<int64_t>(1, (int64_t(1) << 15) / (h * w));
    parallelChunks(planes, grain, [&](int64_t lo, int64_t hi) {
      std::vector<float> best(static_cast<size_t>(ow));
      std::vector<int32_t> at(static_cast<size_t>(ow));
      std::vector<float> map(
          padded ? static_cast<size_t>(rows * rowWidth + (kw - 1) * win.dw) : 0,
          -std::numeric_limits<float>::infinity());
      std::vector<float> rowBest(static_cast<size_t>(rows * rowOutputs));
      std::vector<int32_t> rowAt(
          gradient ? static_cast<size_t>(rows * rowOutputs) : 0);
      for (int64_t plane = lo; plane < hi; ++plane) {
        const float *x = input + plane * h * w;
        if (padded) {
          for (int64_t y = 0; y < h; ++y)
            std::copy_n(x + y * w, w,
                        map.data() + (y + win.ph) * rowWidth + win.pw);
          x = map.data();
        }
        scanColumns(x, rowBest.data(), gradient ? rowAt.data() : nullptr);
        float *dx = gradient ? gradInput + plane * h * w : nullptr;
        if (dx)
          std::fill_n(dx, h * w, 0.0f);
        for (int64_t oy = 0; oy < oh; ++oy) {
          float *maxima =
              gradient ? best.data() : output + (plane * oh + oy) * ow;
          int32_t *where = gradient ? at.data() : nullptr;
          scanRows(rowBest.data(), rowAt.data(), oy, maxima, where);
          if (!dx)
            continue;
          const float *dy = gradOutput + (plane * oh + oy) * ow;
          for (int64_t ox = 0; ox < ow; ++ox)
            dx[mapIndex(at[ox], oy, ox)] += dy[ox];
        }
      }
    });
  }

private:
  /// The first half: each row's maxima over the windows' columns, the
  /// whole map (`x`, the input's or the padded copy) as one run of rows x
  /// rowOutputs outputs (output j reads x[j win.sw + kx win.dw]), into
  /// `rowBest` and with `rowAt` their flat indices in `x`. The same maxima and
  /// arg-maxima as scanning each window row by row: the first largest of
  /// the first row that holds the largest.
  void scanColumns(const float *x, float *rowBest, int32_t *rowAt) const {
    int64_t n = rows * rowOutputs;
    for (int64_t j = 0; j < n; ++j)
      rowBest[j] = x[j * win.sw];
    if (rowAt)
      for (int64_t j = 0; j < n; ++j)
        rowAt[j] = static_cast<int32_t>(j * win.sw);
    for (int64_t kx = 1; kx < kw; ++kx) {
      int32_t first = static_cast<int32_t>(kx * win.dw);
      if (win.sw == 2)
        scanTap<2>(x + first, 2, first, 0, n, rowBest, rowAt);
      else
        scanTap<0>(x + first, win.sw, first, 0, n, rowBest, rowAt);
    }
  }

  /// The second half: output row `oy`'s maxima over the windows' rows of
  /// `rowBest` into `best`, and with `at` their flat indices.
  void scanRows(const float *rowBest, const int32_t *rowAt, int64_t oy,
                float *best, int32_t *at) const {
    const float *first = rowBest + oy * win.sh * rowOutputs;
    std::copy_n(first, ow, best);
    if (at)
      std::copy_n(rowAt + oy * win.sh * rowOutputs, ow, at);
    for (int64_t ky = 1; ky < kh; ++ky) {
      int64_t row = (oy * win.sh + ky * win.dh) * rowOutputs;
      const float *r = rowBest + row;
      if (!at) {
        for (int64_t ox = 0; ox < ow; ++ox)
          best[ox] = larger(r[ox], best[ox]);
        continue;
      }
      const int32_t *ra = rowAt + row;
      for (int64_t ox = 0; ox < ow; ++ox) {
        keepLarger(r[ox], ra[ox], best[ox], at[ox]);
      }
    }
  }

  /// One tap over outputs [lo, hi): tap ox reads row[ox x stride] (flat
  /// index first + ox x stride); `Stride` the stride when known (0: not).
  /// Branch-free, so that it vectorizes: on random data a branch per
  /// comparison is mispredicted half the time.
  template <int Stride>
  static void scanTap(const float *row, int64_t stride, int32_t first,
                      int64_t lo, int64_t hi, float *best, int32_t *at) {
    int64_t step = Stride ? Stride : stride;
    if (!at) {
      for (int64_t ox = lo; ox < hi; ++ox) {
        float v = row[ox * step];
        best[ox] = larger(v, best[ox]);
      }
      return;
    }
    for (int64_t ox = lo; ox < hi; ++ox) {
      float v = row[ox * step];
      keepLarger(v, first + static_cast<int32_t>(ox * step), best[ox], at[ox]);
    }
  }

  /// The input's flat index of arg-max `at` (a flat index of the map
  /// scanned) of output (oy, ox): itself, or where `at` is the padding
  /// (every tap -inf), the output's first tap inside the map.
  int64_t mapIndex(int32_t at, int64_t oy, int64_t ox) const {
    if (!padded)
      return at;
    int64_t y = at / rowWidth - win.ph, x = at % rowWidth - win.pw;
    if (y >= 0 && y < h && x >= 0 && x < w)
      return y * w + x;
    y = oy * win.sh - win.ph;
    x = ox * win.sw - win.pw;
    while (y < 0)
      y += win.dh;
    while (x < 0)
      x += win.dw;
    return std::min(y, h - 1) * w + std::min(x, w - 1);
  }

  bool gradient, padded = false;
  int64_t rows = 0, rowOutputs = 0, rowWidth = 0; // of the map scanned
  const float *input = nullptr, *gradOutput = nullptr;
  float *output = nullptr, *gradInput = nullptr;
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1;
  Window2d win;
};

/// A pooling `primitive` of one input and one output on the channel
/// blocks it chose (`inLayout`, `outLayout`): the arena's plain input
/// reordered into them before it runs, its output back after.
std::unique_ptr<Kernel> inBlocks(OneDnn &dnn, dnnl::primitive primitive,
                                 std::pair<int, memory> in,
                                 const memory::desc &inLayout,
                                 std::pair<int, memory> out,
                                 const memory::desc &outLayout) {
  auto kernel = std::make_unique<ReorderedKernel>(dnn, std::move(primitive));
  kernel->bind(in.first, in.second, inLayout, false);
  kernel->bind(out.first, out.second, outLayout, true);
  return kernel;
}

std::unique_ptr<Kernel> forwardPool(const KernelSpec &spec,
                                    const KernelMemory &mem, OneDnn &dnn,
                                    dnnl::algorithm algorithm,
                                    const Window &w) {
  memory src = bindSlot(spec, spec.operand("input"), mem, dnn);
  memory dst = bindSlot(spec, spec.result("output"), mem, dnn);
  for (memory::format_tag layout :
       blockedLayouts(src.get_desc().dims().size())) {
    dnnl::pooling_v2_forward::desc blocked(
        dnnl::prop_kind::forward_inference, algorithm, inLayout(src, layout),
        inLayout(dst, layout), w.strides, w.kernel, w.dilations, w.padL,
        w.padR);
    dnnl::pooling_v2_forward::primitive_desc pd(blocked, dnn.attr, dnn.engine,
                                                true);
    if (!pd || !isJit(pd))
      continue;
    return inBlocks(dnn, dnnl::pooling_v2_forward(pd), {DNNL_ARG_SRC, src},
                    pd.src_desc(), {DNNL_ARG_DST, dst}, pd.dst_desc());
  }
  dnnl::pooling_v2_forward::desc desc(
      dnnl::prop_kind::forward_inference, algorithm, src.get_desc(),
      dst.get_desc(), w.strides, w.kernel, w.dilations, w.padL, w.padR);
  return std::make_unique<PrimitiveKernel>(
      dnn,
      dnnl::pooling_v2_forward(
          dnnl::pooling_v2_forward::primitive_desc(desc, dnn.attr, dnn.engine)),
      std::unordered_map<int, memory>{{DNNL_ARG_SRC, src},
                                      {DNNL_ARG_DST, dst}});
}

std::unique_ptr<Kernel> createMaxPool(const KernelSpec &spec,
                                      const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input"), &out = spec.result("output");
  checkPool(spec, {&x, &out}, true, true);
  if (MaxPool2dKernel::applies(x))
    return std::make_unique<MaxPool2dKernel>(spec, mem, /*gradient=*/false);
  return forwardPool(spec, mem, dnn, dnnl::algorithm::pooling_max,
                     poolWindow(spec, x, out, true));
}

std::unique_ptr<Kernel> createAvgPool(const KernelSpec &spec,
                                      const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input"), &out = spec.result("output");
  checkPool(spec, {&x, &out}, true, false);
  return forwardPool(spec, mem, dnn, averaging(spec),
                     poolWindow(spec, x, out, false));
}

std::unique_ptr<Kernel> createGlobalAvgPool(const KernelSpec &spec,
                                            const KernelMemory &mem,
                                            OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input");
  size_t spatial = checkPool(spec, {&x, &spec.result("output")}, false, false);
  Window w;
  w.kernel.assign(x.shape.begin() + 2, x.shape.end());
  w.strides.assign(spatial, 1);
  w.padL.assign(spatial, 0);
  w.padR.assign(spatial, 0);
  w.dilations.assign(spatial, 0);
  return forwardPool(spec, mem, dnn,
                     dnnl::algorithm::pooling_avg_include_padding, w);
}

/// Max pooling backward: re-runs the forward in training mode for its
/// workspace (the arg-max positions), then routes the gradient; in the
/// primitives' layouts, the arena's plain tensors reordered into them and
/// the gradient back.
class MaxPoolGradKernel : public Kernel {
public:
  MaxPoolGradKernel(OneDnn &dnn, dnnl::pooling_v2_forward::primitive_desc fwd,
                    dnnl::pooling_v2_backward::primitive_desc bwd, memory src,
                    memory gradOut, memory gradIn)
      : dnn(dnn), forward(fwd), backward(bwd),
        src(inner(src, fwd.src_desc(), false)),
        gradOut(inner(gradOut, bwd.diff_dst_desc(), false)),
        gradIn(inner(gradIn, bwd.diff_src_desc(), true)),
        forwardDst(buffers.addMemory(fwd.dst_desc(), dnn.engine)),
        workspace(buffers.addMemory(fwd.workspace_desc(), dnn.engine)),
        forwardArgs{{DNNL_ARG_SRC, this->src},
                    {DNNL_ARG_DST, forwardDst},
                    {DNNL_ARG_WORKSPACE, workspace}},
        backwardArgs{{DNNL_ARG_DIFF_DST, this->gradOut},
                     {DNNL_ARG_WORKSPACE, workspace},
                     {DNNL_ARG_DIFF_SRC, this->gradIn}} {
    buffers.addScratchpad(forward, dnn.engine, forwardArgs);
    buffers.addScratchpad(backward, dnn.engine, backwardArgs);
    dnn.workspace.reserve(buffers.bytes());
  }
  void run() override {
    buffers.bind(dnn.workspace);
    for (LayoutCopy &copy : before)
      copy.run(dnn.stream);
    forward.execute(dnn.stream, forwardArgs);
    backward.execute(dnn.stream, backwardArgs);
    for (LayoutCopy &copy : after)
      copy.run(dnn.stream);
    dnn.stream.wait();
  }

private:
  /// `plain` itself, or a buffer of layout `chosen` (in the device's
  /// workspace) that runs reorder into (an input) or out of (an output).
  memory inner(const memory &plain, const memory::desc &chosen, bool output) {
    if (plain.get_desc() == chosen)
      return plain;
    memory m = buffers.addMemory(chosen, dnn.engine);
    if (output)
      after.emplace_back(m, plain);
    else
      before.emplace_back(plain, m);
    return m;
  }

  OneDnn &dnn;
  dnnl::pooling_v2_forward forward;
  dnnl::pooling_v2_backward backward;
  // Declared before the memories that the constructor places in it.
  ScratchLayout buffers;
  std::vector<LayoutCopy> before, after;
  memory src, gradOut, gradIn, forwardDst, workspace;
  std::unordered_map<int, memory> forwardArgs, backwardArgs;
};

std::unique_ptr<Kernel> createMaxPoolGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          OneDnn &dnn) {
  const TensorSlot &gradOut = spec.operand("grad_output");
  const TensorSlot &x = spec.operand("input");
  const TensorSlot &gradIn = spec.result("grad_input");
  checkPool(spec, {&gradOut, &x, &gradIn}, true, true);
  if (MaxPool2dKernel::applies(x))
    return std::make_unique<MaxPool2dKernel>(spec, mem, /*gradient=*/true);
  Window w = poolWindow(spec, x, gradOut, true);
  memory src = bindSlot(spec, x, mem, dnn);
  memory dOut = bindSlot(spec, gradOut, mem, dnn);
  memory dIn = bindSlot(spec, gradIn, mem, dnn);
  for (memory::format_tag layout : blockedLayouts(x.shape.size())) {
    dnnl::pooling_v2_forward::desc fwd(
        dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max,
        inLayout(src, layout), inLayout(dOut, layout), w.strides, w.kernel,
        w.dilations, w.padL, w.padR);
    dnnl::pooling_v2_forward::primitive_desc fwdPd(fwd, dnn.attr, dnn.engine,
                                                   true);
    if (!fwdPd || !isJit(fwdPd))
      continue;
    dnnl::pooling_v2_backward::desc bwd(dnnl::algorithm::pooling_max,
                                        inLayout(dIn, layout),
                                        inLayout(dOut, layout), w.strides,
                                        w.kernel, w.dilations, w.padL, w.padR);
    dnnl::pooling_v2_backward::primitive_desc bwdPd(bwd, dnn.attr, dnn.engine,
                                                    fwdPd, true);
    if (!bwdPd || !isJit(bwdPd))
      continue;
    return std::make_unique<MaxPoolGradKernel>(dnn, fwdPd, bwdPd, src, dOut,
                                               dIn);
  }
  dnnl::pooling_v2_forward::desc fwd(dnnl::prop_kind::forward_training,
                                     dnnl::algorithm::pooling_max,
                                     src.get_desc(), dOut.get_desc(), w.strides,
                                     w.kernel, w.dilations, w.padL, w.padR);
  dnnl::pooling_v2_forward::primitive_desc fwdPd(fwd, dnn.attr, dnn.engine);
  dnnl::pooling_v2_backward::desc bwd(
      dnnl::algorithm::pooling_max, dIn.get_desc(), dOut.get_desc(), w.strides,
      w.kernel, w.dilations, w.padL, w.padR);
  dnnl::pooling_v2_backward::primitive_desc bwdPd(bwd, dnn.attr, dnn.engine,
                                                  fwdPd);
  return std::make_unique<MaxPoolGradKernel>(dnn, fwdPd, bwdPd, src, dOut, dIn);
}

/// Average pooling backward: the gradient spread evenly over each window;
/// in channel blocks where oneDNN has generated code for them, as the
/// forward (on plain tensors its backward is a loop of its own, 0.86 ms
/// for a CNN's 2x2 pooling of 32 x 8 maps of 28 x 28 on a Zen 3, where the
/// forward took 0.2 in blocks).
std::unique_ptr<Kernel> createAvgPoolGrad(const KernelSpec &spec,
                                          const KernelMemory &mem,
                                          OneDnn &dnn) {
  const TensorSlot &gradOut = spec.operand("grad_output");
  const TensorSlot &gradIn = spec.result("grad_input");
  checkPool(spec, {&gradOut, &gradIn}, true, false);
  Window w = poolWindow(spec, gradIn, gradOut, false);
  dnnl::algorithm algorithm = averaging(spec);
  memory dOut = bindSlot(spec, gradOut, mem, dnn);
  memory dIn = bindSlot(spec, gradIn, mem, dnn);
  for (memory::format_tag layout : blockedLayouts(gradIn.shape.size())) {
    dnnl::pooling_v2_forward::desc fwd(dnnl::prop_kind::forward_training,
                                       algorithm, inLayout(dIn, layout),
                                       inLayout(dOut, layout), w.strides,
                                       w.kernel, w.dilations, w.padL, w.padR);
    dnnl::pooling_v2_forward::primitive_desc hint(fwd, dnn.attr, dnn.engine,
                                                  true);
    if (!hint)
      continue;
    dnnl::pooling_v2_backward::desc bwd(algorithm, inLayout(dIn, layout),
                                        inLayout(dOut, layout), w.strides,
                                        w.kernel, w.dilations, w.padL, w.padR);
    dnnl::pooling_v2_backward::primitive_desc pd(bwd, dnn.attr, dnn.engine,
                                                 hint, true);
    if (!pd || !isJit(pd))
      continue;
    return inBlocks(dnn, dnnl::pooling_v2_backward(pd),
                    {DNNL_ARG_DIFF_DST, dOut}, pd.diff_dst_desc(),
                    {DNNL_ARG_DIFF_SRC, dIn}, pd.diff_src_desc());
  }
  dnnl::pooling_v2_forward::desc fwd(
      dnnl::prop_kind::forward_training, algorithm, dIn.get_desc(),
      dOut.get_desc(), w.strides, w.kernel, w.dilations, w.padL, w.padR);
  dnnl::pooling_v2_forward::primitive_desc hint(fwd, dnn.attr, dnn.engine);
  dnnl::pooling_v2_backward::desc bwd(algorithm, dIn.get_desc(),
                                      dOut.get_desc(), w.strides, w.kernel,
                                      w.dilations, w.padL, w.padR);
  return std::make_unique<PrimitiveKernel>(
      dnn,
      dnnl::pooling_v2_backward(dnnl::pooling_v2_backward::primitive_desc(
          bwd, dnn.attr, dnn.engine, hint)),
      std::unordered_map<int, memory>{{DNNL_ARG_DIFF_DST, dOut},
                                      {DNNL_ARG_DIFF_SRC, dIn}});
}

} // namespace

std::vector<KernelFactoryEntry> poolKernels() {
  return {{"max_pool", createMaxPool},
          {"avg_pool", createAvgPool},
          {"global_avg_pool", createGlobalAvgPool},
          {"max_pool_grad", createMaxPoolGrad},
          {"avg_pool_grad", createAvgPoolGrad}};
}

} // namespace gpipe::runtime::cpu
