// The CPU backend's 2-D max pooling and its gradient against PyTorch's
// definition, element by element: the maximum of each window's taps inside
// the map, its gradient routed to the first largest tap (taps scanned row
// by row, a NaN taken where met; an all -inf window's to its first tap),
// gradients of overlapping windows summed. On random maps with ties, a
// NaN and a -inf window planted; windows of 2x2 stride 2 (VGG's), 3x3
// stride 2 padded (ResNet's stem), stride 1, dilated, and ceil_mode
// windows running past the map's end (through the backend's padded copy of
// the map); windows that tile the map's rows (no copy).
#include "cpu/CpuBackend.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace gpipe::runtime;

namespace {

struct PoolCase {
  int64_t n, c, h, w;
  int64_t kernel, stride, pad, dilation;
  bool ceil;
};

int64_t outputSize(const PoolCase &p, int64_t size) {
  int64_t span = size + 2 * p.pad - p.dilation * (p.kernel - 1) - 1;
  int64_t out = (p.ceil ? (span + p.stride - 1) : span) / p.stride + 1;
  // PyTorch's rule: the last window starts inside the map or its left pad.
  if (p.ceil && (out - 1) * p.stride >= size + p.pad)
    --out;
  return out;
}

/// Each output's arg-max as PyTorch's max_pool2d_with_indices finds it.
std::vector<int64_t> referenceArgMax(const PoolCase &p, const float *x,
                                     int64_t oh, int64_t ow) {
  std::vector<int64_t> at;
  for (int64_t plane = 0; plane < p.n * p.c; ++plane)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t y0 = oy * p.stride - p.pad, x0 = ox * p.stride - p.pad;
        while (y0 < 0)
          y0 += p.dilation;
        while (x0 < 0)
          x0 += p.dilation;
        int64_t best = plane * p.h * p.w + y0 * p.w + x0;
        float value = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < p.kernel; ++i)
          for (int64_t j = 0; j < p.kernel; ++j) {
            int64_t iy = oy * p.stride - p.pad + i * p.dilation;
            int64_t ix = ox * p.stride - p.pad + j * p.dilation;
            if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w)
              continue;
            int64_t k = plane * p.h * p.w + iy * p.w + ix;
            if (x[k] > value || std::isnan(x[k])) {
              value = x[k];
              best = k;
            }
          }
        at.push_back(best);
      }
  return at;
}

/// Bit-equal, or both NaN.
bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

void checkMaxPool(const PoolCase &p) {
  int64_t oh = outputSize(p, p.h), ow = outputSize(p, p.w);
  std::vector<int64_t> in{p.n, p.c, p.h, p.w}, out{p.n, p.c, oh, ow};
  auto geometry = [&](test::KernelCase &k) {
    double kernel = double(p.kernel), stride = double(p.stride),
           pad = double(p.pad), dilation = double(p.dilation);
    k.number("kernel_shape", {kernel, kernel});
    k.number("strides", {stride, stride});
    k.number("pads", {pad, pad, pad, pad});
    k.number("dilations", {dilation, dilation});
    k.number("ceil_mode", {p.ceil ? 1.0 : 0.0});
  };
  test::KernelCase forward("max_pool");
  forward.operand("input", in).result("output", out);
  geometry(forward);
  test::KernelCase backward("max_pool_grad");
  backward.operand("grad_output", out).operand("input", in);
  backward.result("grad_input", in);
  geometry(backward);

  // Normal noise, values repeated (ties, as ReLU's zeros make), one NaN,
  // and a window of -inf.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t count = p.n * p.c * p.h * p.w;
  std::vector<float> x(static_cast<size_t>(count)),
      dy(out[0] * out[1] * oh * ow);
  for (float &v : x)
    v = normal(rng);
  for (int64_t i = 0; i < count; i += 3)
    x[i] = x[(i * 7 + 1) % count] > 0 ? 0.0f : x[i];
  x[count / 2] = std::nanf("");
  for (int64_t i = 0; i < std::min<int64_t>(p.kernel, p.w); ++i)
    x[i] = -std::numeric_limits<float>::infinity();
  for (float &v : dy)
    v = normal(rng);

  auto run = [&](test::KernelCase &k, std::vector<const float *> operands) {
    std::vector<char> arena(static_cast<size_t>(k.arenaBytes()));
    for (size_t i = 0; i < operands.size(); ++i) {
      const TensorSlot &t = k.spec.operands[i];
      std::memcpy(arena.data() + t.offset, operands[i],
                  static_cast<size_t>(t.byteSize()));
    }
    // The result starts as garbage: every element must be written.
    const TensorSlot &r = k.spec.results[0];
    std::fill_n(reinterpret_cast<float *>(arena.data() + r.offset),
                r.numElements(), 1e30f);
    bool update = true;
    RandomState random{1, 0, 0};
    KernelMemory mem{arena.data(), arena.data(), false, &update, &random};
    cpu::CpuBackend cpu("cpu:0");
    cpu.createKernel(k.spec, mem)->run();
    const float *f = reinterpret_cast<const float *>(arena.data() + r.offset);
    return std::vector<float>(f, f + r.numElements());
  };
  std::vector<float> y = run(forward, {x.data()});
  std::vector<float> dx = run(backward, {dy.data(), x.data()});

  std::vector<int64_t> at = referenceArgMax(p, x.data(), oh, ow);
  std::vector<float> expected(static_cast<size_t>(count), 0.0f);
  for (size_t o = 0; o < at.size(); ++o)
    expected[at[o]] += dy[o];
  int64_t wrongOutputs = 0, wrongGradients = 0;
  for (size_t o = 0; o < at.size(); ++o)
    wrongOutputs += !same(y[o], x[at[o]]);
  for (int64_t i = 0; i < count; ++i)
    wrongGradients += !same(dx[i], expected[i]);
  EXPECT_EQ(wrongOutputs, 0) << p.h << "x" << p.w << " kernel " << p.kernel
                             << " stride " << p.stride << " pad " << p.pad;
  EXPECT_EQ(wrongGradients, 0) << p.h << "x" << p.w << " kernel " << p.kernel
                               << " stride " << p.stride << " pad " << p.pad;
}

TEST(CpuPoolKernels, MaxPoolAsPyTorch) {
  checkMaxPool({8, 16, 28, 28, 2, 2, 0, 1, false}); // VGG's
  checkMaxPool({2, 64, 16, 16, 3, 2, 1, 1, false}); // ResNet's stem
  checkMaxPool({2, 3, 9, 11, 3, 1, 1, 1, false});   // overlapping windows
  checkMaxPool({2, 3, 13, 10, 3, 2, 2, 2, false});  // dilated
  checkMaxPool({2, 3, 7, 9, 2, 2, 0, 1, true});     // past the end
  checkMaxPool({1, 5, 6, 6, 3, 3, 1, 1, true});
  // Windows that tile the rows (scanned without a padded copy).
  checkMaxPool({1, 5, 6, 6, 3, 3, 0, 1, false});
  checkMaxPool({2, 3, 8, 8, 2, 4, 0, 2, false});
}

/// Average pooling's gradient, on random gradients of the outputs.
/// Bound: an input sums at most kernel^2 terms dy / count, each rounded
/// once (u = 2^-24), and the sum's roundings: |error| <= (kernel^2 + 1) u
/// the sum of the terms' magnitudes.
void checkAvgPoolGrad(const PoolCase &p, bool includePad) {
  int64_t oh = outputSize(p, p.h), ow = outputSize(p, p.w);
  std::vector<int64_t> in{p.n, p.c, p.h, p.w}, out{p.n, p.c, oh, ow};
  test::KernelCase k("avg_pool_grad");
  k.operand("grad_output", out).result("grad_input", in);
  double kernel = double(p.kernel), stride = double(p.stride),
         pad = double(p.pad);
  k.number("kernel_shape", {kernel, kernel});
  k.number("strides", {stride, stride});
  k.number("pads", {pad, pad, pad, pad});
  k.number("ceil_mode", {p.ceil ? 1.0 : 0.0});
  k.number("count_include_pad", {includePad ? 1.0 : 0.0});
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<char> arena(static_cast<size_t>(k.arenaBytes()));
  const TensorSlot &g = k.spec.operands[0], &r = k.spec.results[0];
  float *dy = reinterpret_cast<float *>(arena.data() + g.offset);
  float *dx = reinterpret_cast<float *>(arena.data() + r.offset);
  for (int64_t i = 0; i < g.numElements(); ++i)
    dy[i] = normal(rng);
  std::fill_n(dx, r.numElements(), 1e30f);
  KernelMemory mem{arena.data(), arena.data()};
  cpu::CpuBackend cpu("cpu:0");
  cpu.createKernel(k.spec, mem)->run();

  std::vector<double> want(static_cast<size_t>(r.numElements()), 0.0),
      magnitude(want.size(), 0.0);
  for (int64_t plane = 0; plane < p.n * p.c; ++plane)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t y0 = oy * p.stride - p.pad, x0 = ox * p.stride - p.pad;
        // The window as far as the padded map reaches (count_include_pad
        // counts its padding), and its taps inside the map.
        int64_t y1 = std::min(y0 + p.kernel, p.h + p.pad);
        int64_t x1 = std::min(x0 + p.kernel, p.w + p.pad);
        int64_t inside = 0;
        for (int64_t y = std::max<int64_t>(y0, 0); y < std::min(y1, p.h); ++y)
          for (int64_t x = std::max<int64_t>(x0, 0); x < std::min(x1, p.w); ++x)
            ++inside;
        double count = includePad ? double((y1 - y0) * (x1 - x0)) : inside;
        double term = dy[(plane * oh + oy) * ow + ox] / count;
        for (int64_t y = std::max<int64_t>(y0, 0); y < std::min(y1, p.h); ++y)
          for (int64_t x = std::max<int64_t>(x0, 0); x < std::min(x1, p.w);
               ++x) {
            want[(plane * p.h + y) * p.w + x] += term;
            magnitude[(plane * p.h + y) * p.w + x] += std::fabs(term);
          }
      }
  const double u = std::ldexp(1.0, -24);
  int64_t wrong = 0;
  for (size_t i = 0; i < want.size(); ++i)
    wrong += !(std::fabs(dx[i] - want[i]) <=
               (p.kernel * p.kernel + 1) * u * magnitude[i]);
  EXPECT_EQ(wrong, 0) << p.h << "x" << p.w << " kernel " << p.kernel
                      << " stride " << p.stride << " pad " << p.pad
                      << (includePad ? " counting the padding" : "");
}

TEST(CpuPoolKernels, AvgPoolGradientAsDefined) {
  for (bool includePad : {false, true}) {
    checkAvgPoolGrad({32, 8, 28, 28, 2, 2, 0, 1, false}, includePad);
    checkAvgPoolGrad({2, 3, 9, 11, 3, 1, 1, 1, false}, includePad);
    checkAvgPoolGrad({2, 20, 7, 9, 3, 2, 1, 1, true}, includePad);
  }
}

} // namespace
