// The CPU backend's convolution weight gradient against a direct sum in
// double: depthwise on maps smaller than the kernel (where the backend runs
// its own loop, oneDNN having only a gemm per channel there), depthwise on
// larger maps (oneDNN's depthwise kernel), strided and dilated, a grouped
// and a plain convolution, and 3x3 kernels on 1x1 and 2x2 maps (where
// the backend multiplies chunks of images at once), first layers of one input
// channel (the same product); and a convolution whose weights are parameters,
// converted to oneDNN's layout once per parameter version.
#include "cpu/CpuBackend.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include "KernelSpecBuilder.h"

#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

using namespace gpipe::runtime;

namespace {

using Shape = std::vector<int64_t>;

struct ConvCase {
  Shape input, weight;
  int64_t group, stride, pad, dilation;
};

Shape outputShape(const ConvCase &c) {
  Shape out{c.input[0], c.weight[0]};
  for (int d = 2; d < 4; ++d)
    out.push_back(
        (c.input[d] + 2 * c.pad - c.dilation * (c.weight[d] - 1) - 1) /
            c.stride +
        1);
  return out;
}

/// The case's group, strides, pads and dilations on `built`.
void setGeometry(test::KernelCase &built, const ConvCase &c) {
  built.number("group", {static_cast<double>(c.group)});
  built.number("strides", {double(c.stride), double(c.stride)});
  built.number("pads",
               {double(c.pad), double(c.pad), double(c.pad), double(c.pad)});
  built.number("dilations", {double(c.dilation), double(c.dilation)});
}

/// N(0, 1) values in every operand.
void drawOperands(const KernelSpec &spec, std::vector<char> &arena,
                  std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const TensorSlot &t : spec.operands) {
    auto *f = reinterpret_cast<float *>(arena.data() + t.offset);
    for (int64_t i = 0; i < t.numElements(); ++i)
      f[i] = normal(rng);
  }
}

/// `x` rounded to the nearest bfloat16 (ties to even), as oneDNN's
/// conversion rounds it; `x` itself unless `inBf16`.
double rounded(float x, bool inBf16) {
  if (!inBf16)
    return x;
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

/// The weights' gradient against the direct sum in double; `inBf16`: of
/// the operands rounded to bfloat16 (compute_type "bf16"), summed in
/// float32 all the same.
void checkGradWeight(const ConvCase &c, bool inBf16 = false) {
  Shape out = outputShape(c);
  test::KernelCase built("conv_grad_weight");
  built.operand("grad_output", out).operand("input", c.input);
  built.result("grad_weight", c.weight);
  setGeometry(built, c);
  built.text("compute_type", inBf16 ? "bf16" : "f32");
  const KernelSpec &spec = built.spec;

  std::vector<char> arena(static_cast<size_t>(built.arenaBytes()), 0);
  std::mt19937 rng(7);
  drawOperands(spec, arena, rng);
  bool update = true;
  RandomState random{1, 0, 0};
  KernelMemory mem{arena.data(), arena.data(), false, &update, &random};
  cpu::CpuBackend cpu("cpu:0");
  cpu.createKernel(spec, mem)->run();

  const float *dy =
      reinterpret_cast<float *>(arena.data() + spec.operands[0].offset);
  const float *x =
      reinterpret_cast<float *>(arena.data() + spec.operands[1].offset);
  const float *dw =
      reinterpret_cast<float *>(arena.data() + spec.results[0].offset);
  int64_t n = c.input[0], ci = c.input[1], h = c.input[2], w = c.input[3];
  int64_t co = c.weight[0], cig = c.weight[1], kh = c.weight[2],
          kw = c.weight[3], oh = out[2], ow = out[3];
  double worst = 0;
  for (int64_t o = 0; o < co; ++o)
    for (int64_t k = 0; k < cig; ++k)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          int64_t channel = o / (co / c.group) * cig + k;
          double sum = 0, magnitude = 0;
          int64_t terms = 0;
          for (int64_t b = 0; b < n; ++b)
            for (int64_t y = 0; y < oh; ++y)
              for (int64_t z = 0; z < ow; ++z) {
                int64_t iy = y * c.stride - c.pad + i * c.dilation;
                int64_t iz = z * c.stride - c.pad + j * c.dilation;
                if (iy < 0 || iy >= h || iz < 0 || iz >= w)
                  continue;
                double product =
                    rounded(dy[((b * co + o) * oh + y) * ow + z], inBf16) *
                    rounded(x[((b * ci + channel) * h + iy) * w + iz], inBf16);
                sum += product;
                magnitude += std::abs(product);
                ++terms;
              }
          double got = dw[((o * cig + k) * kh + i) * kw + j];
          // A float32 sum of `terms` products, in whatever order and
          // blocking, is within terms x u x sum |product| of the exact one
          // (Higham, Accuracy and Stability, 4.2; u = 2^-24), plus the
          // rounding of each product. A missing, doubled or misplaced
          // product errs by about one |product|: terms x u is at most
          // 600 x 6e-8 here.
          double bound = (terms + 1) * 0x1p-24 * magnitude;
          worst = std::max(worst, std::abs(got - sum) / std::max(bound, 1e-30));
        }
  EXPECT_LE(worst, 1.0) << "input " << c.input[2] << "x" << c.input[3]
                        << ", group " << c.group << (inBf16 ? ", bf16" : "");
}

/// The convolution (`gradInput`: its input gradient) against the direct
/// sum in double, element by element within the float32 bound of a sum of
/// its products (as checkGradWeight); with `bias`, the forward adds one.
void checkConvOrGradInput(const ConvCase &c, bool gradInput, bool bias,
                          bool inBf16 = false) {
  Shape out = outputShape(c);
  test::KernelCase built(gradInput ? "conv_grad_input" : "conv");
  built.text("compute_type", inBf16 ? "bf16" : "f32");
  if (gradInput)
    built.operand("grad_output", out).operand("weight", c.weight);
  else
    built.operand("input", c.input).operand("weight", c.weight);
  if (bias)
    built.operand("bias", {c.weight[0]});
  built.result(gradInput ? "grad_input" : "output", gradInput ? c.input : out);
  setGeometry(built, c);
  const KernelSpec &spec = built.spec;
  std::vector<char> arena(static_cast<size_t>(built.arenaBytes()), 0);
  std::mt19937 rng(5);
  drawOperands(spec, arena, rng);
  // The result starts as garbage: every element must be written.
  {
    const TensorSlot &r = spec.results[0];
    auto *f = reinterpret_cast<float *>(arena.data() + r.offset);
    std::fill_n(f, r.numElements(), 1e30f);
  }
  bool update = true;
  RandomState random{1, 0, 0};
  KernelMemory mem{arena.data(), arena.data(), false, &update, &random};
  cpu::CpuBackend cpu("cpu:0");
  cpu.createKernel(spec, mem)->run();
  auto at = [&](const TensorSlot &t) {
    return reinterpret_cast<float *>(arena.data() + t.offset);
  };
  const float *first = at(spec.operands[0]), *w = at(spec.operands[1]);
  const float *b = bias ? at(spec.operands[2]) : nullptr;
  const float *got = at(spec.results[0]);
  int64_t n = c.input[0], ci = c.input[1], h = c.input[2], wd = c.input[3];
  int64_t co = c.weight[0], kh = c.weight[2], kw = c.weight[3], oh = out[2],
          ow = out[3];
  // Sums per result element: products of (input or grad_output) and weight.
  std::vector<double> sum(
      static_cast<size_t>(gradInput ? n * ci * h * wd : n * co * oh * ow)),
      magnitude(sum.size());
  std::vector<int64_t> terms(sum.size());
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z)
          for (int64_t k = 0; k < ci; ++k)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t iy = y * c.stride - c.pad + i * c.dilation;
                int64_t iz = z * c.stride - c.pad + j * c.dilation;
                if (iy < 0 || iy >= h || iz < 0 || iz >= wd)
                  continue;
                int64_t xi = ((s * ci + k) * h + iy) * wd + iz;
                int64_t yi = ((s * co + o) * oh + y) * ow + z;
                double weight =
                    rounded(w[((o * ci + k) * kh + i) * kw + j], inBf16);
                double product =
                    weight * rounded(gradInput ? first[yi] : first[xi], inBf16);
                size_t r = static_cast<size_t>(gradInput ? xi : yi);
                sum[r] += product;
                magnitude[r] += std::abs(product);
                ++terms[r];
              }
  double worst = 0;
  for (size_t r = 0; r < sum.size(); ++r) {
    double want = sum[r], size = magnitude[r];
    if (b) {
      double v = b[(static_cast<int64_t>(r) / (oh * ow)) % co];
      want += v;
      size += std::abs(v);
    }
    // As checkGradWeight: (terms + 1) u sum |product|; an element no
    // product reaches must be exactly 0 (or the bias).
    double bound = (terms[r] + 2) * 0x1p-24 * size;
    worst = std::max(worst, std::abs(got[r] - want) / std::max(bound, 1e-30));
  }
  EXPECT_LE(worst, 1.0) << (gradInput ? "conv_grad_input" : "conv") << " input "
                        << c.input[2] << "x" << c.input[3] << ", kernel " << kh
                        << "x" << kw << ", stride " << c.stride
                        << (bias ? ", bias" : "") << (inBf16 ? ", bf16" : "");
}

} // namespace

TEST(CpuConvKernels, DepthwiseWeightGradientOnMapsSmallerThanTheKernel) {
  checkGradWeight({{4, 16, 1, 1}, {16, 1, 3, 3}, 16, 1, 1, 1});
  checkGradWeight({{4, 16, 2, 2}, {16, 1, 3, 3}, 16, 1, 1, 1});
  checkGradWeight({{4, 16, 2, 2}, {16, 1, 3, 3}, 16, 2, 1, 1});
}

TEST(CpuConvKernels, DepthwiseWeightGradientOnLargerMaps) {
  checkGradWeight({{2, 16, 9, 9}, {16, 1, 3, 3}, 16, 1, 1, 1});
  checkGradWeight({{2, 16, 9, 9}, {16, 1, 3, 3}, 16, 2, 1, 1});
  checkGradWeight({{2, 16, 9, 9}, {16, 1, 3, 3}, 16, 1, 2, 2});
}

TEST(CpuConvKernels, GroupedAndPlainWeightGradients) {
  checkGradWeight({{2, 8, 6, 6}, {8, 2, 3, 3}, 4, 1, 1, 1});
  checkGradWeight({{2, 3, 5, 5}, {4, 3, 3, 3}, 1, 1, 1, 1});
}

// ResNet's last blocks on small images: 3x3 kernels on 1x1 and 2x2 maps,
// where the backend multiplies whole chunks of images at once
// (Im2colGradWeightKernel) on every CPU (oneDNN 2.6 without AVX-512 has
// only its gemm fallback there, and its AVX-512 kernel was slower);
// with 150 images of 2x2 maps the patches take two chunks.
TEST(CpuConvKernels, WeightGradientsOnMapsSmallerThanTheKernel) {
  checkGradWeight({{8, 64, 1, 1}, {64, 64, 3, 3}, 1, 1, 1, 1});
  checkGradWeight({{8, 64, 2, 2}, {64, 64, 3, 3}, 1, 1, 1, 1});
  checkGradWeight({{8, 32, 2, 2}, {64, 32, 3, 3}, 1, 2, 1, 1});
  checkGradWeight({{4, 32, 2, 2}, {32, 8, 3, 3}, 4, 1, 1, 1});
  checkGradWeight({{150, 256, 2, 2}, {16, 256, 3, 3}, 1, 1, 1, 1});
}

// An image model's first layer: one input channel, where oneDNN's AVX2
// kernel pads the channels to its block and the backend multiplies the
// patches instead (oneDNN's AVX-512 kernel is kept: faster there) (the
// main job's 28x28 layer; strided, dilated and padded ones on
// maps that are not square, whose edge taps read padding on whole lines),
// and 3 and 4 channels (ResNet's 7x7/2 stem with padding 3; oneDNN's).
TEST(CpuConvKernels, FirstLayerWeightGradients) {
  checkGradWeight({{3, 1, 28, 28}, {16, 1, 3, 3}, 1, 1, 1, 1});
  checkGradWeight({{2, 1, 9, 13}, {5, 1, 3, 3}, 1, 2, 2, 2});
  checkGradWeight({{2, 1, 5, 7}, {3, 1, 3, 3}, 1, 3, 4, 1});
  checkGradWeight({{2, 1, 12, 10}, {4, 1, 7, 7}, 1, 2, 3, 1});
  checkGradWeight({{2, 3, 32, 32}, {8, 3, 7, 7}, 1, 2, 3, 1});
  checkGradWeight({{2, 4, 9, 13}, {5, 4, 3, 3}, 1, 2, 2, 2});
}

namespace {

/// out[b][o][y][x] of a plain 3x3 convolution (padding 1, stride 1) in
/// double.
double convAt(const float *x, const float *w, int64_t ci, int64_t h, int64_t wd,
              int64_t b, int64_t o, int64_t y, int64_t z) {
  double sum = 0;
  for (int64_t k = 0; k < ci; ++k)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        int64_t iy = y - 1 + i, iz = z - 1 + j;
        if (iy >= 0 && iy < h && iz >= 0 && iz < wd)
          sum += double(x[((b * ci + k) * h + iy) * wd + iz]) *
                 w[((o * ci + k) * 3 + i) * 3 + j];
      }
  return sum;
}

} // namespace

// Training runs a convolution once per micro-batch on the same weights:
// the kernel converts parameters to its layout again only when the
// parameters' version changes (an optimizer step), and its data input on
// every run.
// The oneDNN kernel (6x6 maps), the backend's one-pixel product (1x1
// maps, its gathered weights) and its product of patches on maps smaller
// than the kernel (2x1: gathered) keep that contract; on 2x2 maps every
// tap reads the map and that product takes the weights in place.
void checkConvertedOncePerVersion(int64_t h, int64_t wd,
                                  bool readsInPlace = false) {
  SCOPED_TRACE("maps " + std::to_string(h) + "x" + std::to_string(wd));
  const int64_t n = 2, ci = 16, co = 32;
  test::KernelCase built("conv");
  built.operand("input", {n, ci, h, wd}).result("output", {n, co, h, wd});
  built.number("group", {1});
  built.number("strides", {1, 1});
  built.number("pads", {1, 1, 1, 1});
  built.number("dilations", {1, 1});
  KernelSpec &spec = built.spec;
  TensorSlot weight;
  weight.name = "weight";
  weight.shape = {co, ci, 3, 3};
  weight.space = "params";
  spec.operands.push_back(weight);

  std::vector<char> arena(static_cast<size_t>(built.arenaBytes()), 0);
  std::vector<float> params(static_cast<size_t>(weight.numElements()));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto *x = reinterpret_cast<float *>(arena.data() + spec.operands[0].offset);
  const auto *y =
      reinterpret_cast<const float *>(arena.data() + spec.results[0].offset);
  auto draw = [&](float *data, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      data[i] = normal(rng);
  };
  draw(params.data(), weight.numElements());
  bool update = true;
  RandomState random{1, 0, 0};
  uint64_t version = 0;
  KernelMemory mem{arena.data(), reinterpret_cast<char *>(params.data()),
                   false,        &update,
                   &random,      &version};
  cpu::CpuBackend cpu("cpu:0");
  std::unique_ptr<Kernel> kernel = cpu.createKernel(spec, mem);
  // The worst relative error of the output against `w` on the input now.
  auto worst = [&](const std::vector<float> &w) {
    double e = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t o = 0; o < co; ++o)
        for (int64_t r = 0; r < h; ++r)
          for (int64_t c = 0; c < wd; ++c) {
            double want = convAt(x, w.data(), ci, h, wd, b, o, r, c);
            double got = y[((b * co + o) * h + r) * wd + c];
            e = std::max(e, std::abs(got - want) / (1 + std::abs(want)));
          }
    return e;
  };
  // float32 sums of 144 products of N(0, 1) values: about 1e-6.
  const double bound = 1e-5;
  for (int micro = 0; micro < 3; ++micro) {
    draw(x, spec.operands[0].numElements());
    kernel->run();
    EXPECT_LE(worst(params), bound) << "micro-batch " << micro;
  }
  std::vector<float> before = params;
  draw(params.data(), weight.numElements());
  kernel->run();
  if (readsInPlace) {
    // A kernel that multiplies the weights as they are sees them at once.
    EXPECT_LE(worst(params), bound);
  } else {
    // Same version: the weights converted on the first run, by contract.
    EXPECT_LE(worst(before), bound);
    EXPECT_GT(worst(params), 0.1);
  }
  ++version;
  kernel->run();
  EXPECT_LE(worst(params), bound);
}

TEST(CpuConvKernels, ParametersConvertedOncePerVersion) {
  checkConvertedOncePerVersion(6, 6);
  checkConvertedOncePerVersion(1, 1);
  // Maps smaller than the kernel (the backend's patches' product): 2x2,
  // where every tap reads the map and the product takes the weights as
  // they are, and 2x1, where a column of taps reads only padding and the
  // others are gathered.
  checkConvertedOncePerVersion(2, 2, /*readsInPlace=*/true);
  checkConvertedOncePerVersion(2, 1);
}

/// Each case's forward, with and without bias, and its input gradient.
void checkForwardsAndInputGradients(std::initializer_list<ConvCase> cases) {
  for (const ConvCase &c : cases)
    for (bool gradInput : {false, true})
      for (bool bias : {false, true})
        if (!(gradInput && bias))
          checkConvOrGradInput(c, gradInput, bias);
}

/// Each case's forward, with and without bias, and both its gradients.
void checkEveryPass(std::initializer_list<ConvCase> cases) {
  checkForwardsAndInputGradients(cases);
  for (const ConvCase &c : cases)
    checkGradWeight(c);
}

// Convolutions whose output is one pixel (ResNet-18's last stage on 32x32
// images: 3x3 on 1x1 maps, 3x3 with stride 2 and the 1x1 shortcut with
// stride 2 on 2x2 maps), which the backend computes as one product, and
// for contrast one without padding on 3x3 maps (oneDNN's own) and one
// whose output is 2x2 (the backend's patches, below): the forward with
// and without bias and the input gradient.
TEST(CpuConvKernels, ConvolutionsToOnePixel) {
  checkForwardsAndInputGradients(
      {ConvCase{{8, 64, 1, 1}, {32, 64, 3, 3}, 1, 1, 1, 1},
       ConvCase{{8, 32, 2, 2}, {48, 32, 3, 3}, 1, 2, 1, 1},
       ConvCase{{8, 32, 2, 2}, {48, 32, 1, 1}, 1, 2, 0, 1},
       ConvCase{{3, 16, 3, 3}, {8, 16, 3, 3}, 1, 1, 0, 1},
       ConvCase{{4, 16, 2, 2}, {8, 16, 3, 3}, 1, 1, 1, 1}});
}

// Outputs of more than one pixel on maps smaller than the kernel, whose
// forward the backend computes as one product of patches
// (SmallMapConvKernel): ResNet-18's stride-2 3x3 from 4x4 into 2x2 maps,
// maps that are not square (a row or column of taps reads padding at some
// positions only), a 5x5 kernel with padding 2 on 3x2 maps; the forward
// with and without bias, and the input gradient (oneDNN's).
TEST(CpuConvKernels, ConvolutionsOnMapsSmallerThanTheKernel) {
  checkForwardsAndInputGradients(
      {ConvCase{{8, 32, 4, 4}, {48, 32, 3, 3}, 1, 2, 1, 1},
       ConvCase{{4, 16, 2, 3}, {8, 16, 3, 3}, 1, 1, 1, 1},
       ConvCase{{4, 16, 3, 2}, {8, 16, 5, 5}, 1, 1, 2, 1}});
}

// Few input channels at stride 1 (the backend's own loops over the plain
// tensors, NarrowConvKernel and NarrowConvGradWeightKernel): the main
// job's and the small CNNs' first layer (1 -> 8 on 28x28), 3 channels
// into 5 with a 5x5 kernel on maps wider than a pass's two vectors (the
// row's last vectors overlap the ones before) and a channel block left
// partly empty, maps narrower than one vector (7x9 for AVX-512's 16
// floats, 6x5 for AVX2's 8), a 1x1 kernel of 4
// channels into 9, and no padding; the forward with and without bias, the
// weights' and the input's gradients (the last oneDNN's).
TEST(CpuConvKernels, NarrowConvolutions) {
  std::initializer_list<ConvCase> cases = {
      ConvCase{{2, 1, 28, 28}, {8, 1, 3, 3}, 1, 1, 1, 1},
      ConvCase{{3, 3, 13, 40}, {5, 3, 5, 5}, 1, 1, 2, 1},
      ConvCase{{2, 2, 7, 9}, {6, 2, 3, 3}, 1, 1, 1, 1},
      ConvCase{{2, 3, 6, 5}, {5, 3, 3, 3}, 1, 1, 1, 1},
      ConvCase{{2, 4, 16, 17}, {9, 4, 1, 1}, 1, 1, 0, 1},
      ConvCase{{1, 1, 20, 20}, {4, 1, 3, 3}, 1, 1, 0, 1}};
  checkEveryPass(cases);
}

// In bfloat16 (compute_type "bf16", oneDNN's bfloat16 kernels wherever
// the backend would run its own float32 products): a ResNet block's 3x3,
// a strided one, a grouped one, one on maps smaller than its kernel and
// one to one pixel; forward with and without bias, both gradients (the
// grouped one's weights' gradient only, what checkGradWeight's reference
// covers).
TEST(CpuConvKernels, Bfloat16Convolutions) {
  if (!cpuMultipliesBf16())
    GTEST_SKIP() << "oneDNN has no bfloat16 kernels below AVX-512";
  for (const ConvCase &c :
       {ConvCase{{2, 16, 8, 8}, {32, 16, 3, 3}, 1, 1, 1, 1},
        ConvCase{{2, 32, 9, 9}, {16, 32, 3, 3}, 1, 2, 1, 1},
        ConvCase{{2, 32, 6, 6}, {32, 8, 3, 3}, 4, 1, 1, 1},
        ConvCase{{4, 16, 2, 3}, {8, 16, 3, 3}, 1, 1, 1, 1},
        ConvCase{{8, 64, 1, 1}, {32, 64, 3, 3}, 1, 1, 1, 1}}) {
    for (bool gradInput : {false, true})
      for (bool bias : {false, true})
        if (!(gradInput && bias) && c.group == 1) // its reference: one group
          checkConvOrGradInput(c, gradInput, bias, /*inBf16=*/true);
    checkGradWeight(c, /*inBf16=*/true);
  }
}

// Pointwise convolutions (1x1, stride 1, no padding): on maps of at least
// 64 positions, on CPUs without AVX-512, oneDNN's gemm on the plain
// tensors (Conv.cpp, plainPointwise), below that channel blocks: 8x8 and
// 16x12 maps (MobileNet's expansions and projections, channels not a
// multiple of 8), and 4x4 under the threshold; the forward with and
// without bias, both gradients.
TEST(CpuConvKernels, PointwiseConvolutions) {
  std::initializer_list<ConvCase> cases = {
      ConvCase{{4, 16, 8, 8}, {36, 16, 1, 1}, 1, 1, 0, 1},
      ConvCase{{3, 20, 16, 12}, {12, 20, 1, 1}, 1, 1, 0, 1},
      ConvCase{{4, 24, 4, 4}, {40, 24, 1, 1}, 1, 1, 0, 1}};
  checkEveryPass(cases);
}
