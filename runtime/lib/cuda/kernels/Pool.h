// Max, average and global average pooling and their gradients on the GPU,
// for 1 to 3 spatial axes: one thread per output element forward, one per
// input element backward (it gathers from the windows that contain it, so
// no two threads write one element and the sums keep one order).
#ifndef GPIPE_RUNTIME_CUDA_KERNELS_POOL_H
#define GPIPE_RUNTIME_CUDA_KERNELS_POOL_H

#include "BodyKernel.h"

#include <vector>

namespace gpipe::runtime::cuda {

/// A pooling's geometry, spatial axes padded to three (size 1, window 1).
struct PoolGeometry {
  int64_t planes = 1; // N * C
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1},
          pad[3] = {0, 0, 0};
  bool includePad = false;

  GPIPE_HD int64_t inSize() const { return in[0] * in[1] * in[2]; }
  GPIPE_HD int64_t outSize() const { return out[0] * out[1] * out[2]; }
  /// The input coordinate of window tap t of output o along axis a.
  GPIPE_HD int64_t tap(int a, int64_t o, int64_t t) const {
    return o * stride[a] - pad[a] + t * dilation[a];
  }
  GPIPE_HD bool inside(int a, int64_t i) const { return i >= 0 && i < in[a]; }
  /// Calls f(e) for the input offset e (within its plane) of every input
  /// element in output o's window, taps in row-major order.
  template <class F>
  GPIPE_HD void forEachTap(const int64_t o[3], const F &f) const {
    for (int64_t t0 = 0; t0 < kernel[0]; ++t0) {
      int64_t i0 = tap(0, o[0], t0);
      if (!inside(0, i0))
        continue;
      for (int64_t t1 = 0; t1 < kernel[1]; ++t1) {
        int64_t i1 = tap(1, o[1], t1);
        if (!inside(1, i1))
          continue;
        for (int64_t t2 = 0; t2 < kernel[2]; ++t2) {
          int64_t i2 = tap(2, o[2], t2);
          if (inside(2, i2))
            f((i0 * in[1] + i1) * in[2] + i2);
        }
      }
    }
  }
  /// The input offset of the first largest element in output o's window,
  /// or -1 if the window holds no input element.
  GPIPE_HD int64_t argMax(const float *plane, const int64_t o[3]) const {
    int64_t best = -1;
    float max = 0;
    forEachTap(o, [&](int64_t e) {
      if (best < 0 || plane[e] > max) {
        best = e;
        max = plane[e];
      }
    });
    return best;
  }
  /// Output o's window: the sum of its input elements (when `plane` is
  /// given) and the divisor of an average (the whole window with
  /// include-padding, else the input elements it holds).
  GPIPE_HD float window(const float *plane, const int64_t o[3],
                        int64_t *divisor) const {
    float sum = 0;
    int64_t count = 0;
    forEachTap(o, [&](int64_t e) {
      if (plane)
        sum += plane[e];
      ++count;
    });
    *divisor = includePad ? kernel[0] * kernel[1] * kernel[2] : count;
    return sum;
  }
  GPIPE_HD static void split(int64_t e, const int64_t size[3], int64_t c[3]) {
    c[2] = e % size[2];
    e /= size[2];
    c[1] = e % size[1];
    c[0] = e / size[1];
  }
};

struct PoolForwardBody {
  PoolGeometry g;
  const float *x;
  float *y;
  bool max;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t plane = i / g.outSize(), o[3];
    PoolGeometry::split(i % g.outSize(), g.out, o);
    const float *p = x + plane * g.inSize();
    if (max) {
      int64_t e = g.argMax(p, o);
      y[i] = e < 0 ? 0.0f : p[e];
      return;
    }
    int64_t divisor = 0;
    float sum = g.window(p, o, &divisor);
    y[i] = divisor ? sum / static_cast<float>(divisor) : 0.0f;
  }
};

/// dx at input element i: the gradients of the windows that contain it,
/// for max pooling only of those whose largest element it is.
struct PoolBackwardBody {
  PoolGeometry g;
  const float *dy, *x; // x: max pooling only
  float *dx;
  GPIPE_HD void operator()(int64_t i) const {
    int64_t plane = i / g.inSize(), e = i % g.inSize(), c[3];
    PoolGeometry::split(e, g.in, c);
    const float *dyPlane = dy + plane * g.outSize();
    const float *xPlane = x ? x + plane * g.inSize() : nullptr;
    float sum = 0;
    int64_t o[3];
    for (int64_t t0 = 0; t0 < g.kernel[0]; ++t0) {
      if (!outputOf(0, c[0], t0, &o[0]))
        continue;
      for (int64_t t1 = 0; t1 < g.kernel[1]; ++t1) {
        if (!outputOf(1, c[1], t1, &o[1]))
          continue;
        for (int64_t t2 = 0; t2 < g.kernel[2]; ++t2) {
          if (!outputOf(2, c[2], t2, &o[2]))
            continue;
          int64_t oe = (o[0] * g.out[1] + o[1]) * g.out[2] + o[2];
          if (xPlane) {
            if (g.argMax(xPlane, o) == e)
              sum += dyPlane[oe];
            continue;
          }
          int64_t divisor = 0;
          g.window(nullptr, o, &divisor);
          if (divisor)
            sum += dyPlane[oe] / static_cast<float>(divisor);
        }
      }
    }
    dx[i] = sum;
  }
  /// The output whose window tap t along axis a is input coordinate c.
  GPIPE_HD bool outputOf(int a, int64_t c, int64_t t, int64_t *o) const {
    int64_t q = c + g.pad[a] - t * g.dilation[a];
    if (q < 0 || q % g.stride[a] != 0)
      return false;
    *o = q / g.stride[a];
    return *o < g.out[a];
  }
};

/// The geometry of a pooling from `in` to `out` (window attributes when
/// `window`, dilations when `dilations`; a global pooling otherwise).
inline PoolGeometry poolGeometry(const KernelSpec &spec, const TensorSlot &in,
                                 const TensorSlot &out, bool window,
                                 bool dilations) {
  size_t rank = in.shape.size();
  if (rank < 3 || rank > 5 || out.shape.size() != rank)
    spec.fail("operands must have the same rank, 3 to 5 (1 to 3 spatial "
              "axes)");
  needFloat32(spec, {&in, &out});
  size_t spatial = rank - 2;
  PoolGeometry g;
  g.planes = in.shape[0] * in.shape[1];
  if (out.shape[0] * out.shape[1] != g.planes)
    spec.fail("the batch and channel sizes of input and output differ");
  std::vector<int64_t> k, s, p, d;
  if (window) {
    k = spec.ints("kernel_shape");
    s = spec.ints("strides");
    p = spec.ints("pads");
    if (k.size() != spatial || s.size() != spatial || p.size() != 2 * spatial)
      spec.fail("kernel_shape, strides and pads need one entry per spatial "
                "axis (pads two)");
    if (dilations) {
      d = spec.ints("dilations");
      if (d.size() != spatial)
        spec.fail("dilations need one entry per spatial axis");
    }
  }
  size_t first = 3 - spatial;
  for (size_t a = 0; a < spatial; ++a) {
    g.in[first + a] = in.shape[a + 2];
    g.out[first + a] = out.shape[a + 2];
    if (!window) {
      g.kernel[first + a] = in.shape[a + 2];
      continue;
    }
    g.kernel[first + a] = k[a];
    g.stride[first + a] = s[a];
    g.pad[first + a] = p[a];
    if (!d.empty())
      g.dilation[first + a] = d[a];
    if (k[a] < 1 || s[a] < 1 || g.dilation[first + a] < 1)
      spec.fail("kernel_shape, strides and dilations must be positive");
  }
  if (!window && g.outSize() != 1)
    spec.fail("a global pooling's output has spatial size 1");
  g.includePad = !window || (spec.numbers.count("count_include_pad") &&
                             spec.flag("count_include_pad"));
  return g;
}

/// max_pool, avg_pool, global_avg_pool and the gradients of the first two.
template <class L> class PoolKernel : public Kernel {
public:
  PoolKernel(L launcher, const KernelSpec &spec, const KernelMemory &mem)
      : launcher(launcher) {
    const std::string &kind = spec.kind;
    backward = kind == "max_pool_grad" || kind == "avg_pool_grad";
    max = kind == "max_pool" || kind == "max_pool_grad";
    bool window = kind != "global_avg_pool";
    if (backward) {
      const TensorSlot &dy = spec.operand("grad_output");
      const TensorSlot &dx = spec.result("grad_input");
      g = poolGeometry(spec, dx, dy, window, max);
      input = slotData<const float>(dy, mem);
      if (max) {
        const TensorSlot &x = spec.operand("input");
        needFloat32(spec, {&x});
        if (x.shape != dx.shape)
          spec.fail("input and grad_input shapes differ");
        forwardInput = slotData<const float>(x, mem);
      }
      output = slotData<float>(dx, mem);
    } else {
      const TensorSlot &x = spec.operand("input");
      const TensorSlot &y = spec.result("output");
      g = poolGeometry(spec, x, y, window, max);
      input = slotData<const float>(x, mem);
      output = slotData<float>(y, mem);
    }
  }
  void run() override {
    if (backward)
      launcher.launch(g.planes * g.inSize(),
                      PoolBackwardBody{g, input, forwardInput, output});
    else
      launcher.launch(g.planes * g.outSize(),
                      PoolForwardBody{g, input, output, max});
  }

private:
  L launcher;
  bool backward = false, max = false;
  PoolGeometry g;
  const float *input = nullptr, *forwardInput = nullptr;
  float *output = nullptr;
};

} // namespace gpipe::runtime::cuda

#endif // GPIPE_RUNTIME_CUDA_KERNELS_POOL_H
