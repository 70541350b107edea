// Convolution and its gradients (backward data, backward weights) on
// oneDNN's convolution primitives, in the blocked layouts oneDNN picks, and
// by the backend's own loops where oneDNN's are slow (few input channels,
// maps smaller than the kernel, one-pixel outputs).
#include "Families.h"

#include "NarrowConvPlanes.h"
#include "ParallelFor.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime::cpu {

namespace {

/// Convolution geometry shared by the forward and backward kernels.
struct ConvGeometry {
  dims strides, dilations, padL, padR, weightDims;
};

/// Checks ranks and attribute sizes: `first` and `second` (the operands)
/// and `result` have the same rank, at least 3.
void checkConv(const KernelSpec &spec, const TensorSlot &first,
               const TensorSlot &second, const TensorSlot &result) {
  size_t rank = first.shape.size();
  if (rank < 3 || result.shape.size() != rank || second.shape.size() != rank)
    spec.fail("operands must have the same rank, at least 3");
  size_t spatial = rank - 2;
  needEntries(spec, "strides", spatial);
  needEntries(spec, "pads", 2 * spatial);
  needEntries(spec, "dilations", spatial);
}

ConvGeometry convGeometry(const KernelSpec &spec, const TensorSlot &data,
                          const TensorSlot &weight) {
  ConvGeometry g;
  int64_t group = static_cast<int64_t>(spec.number("group"));
  std::vector<int64_t> s = spec.ints("strides"), p = spec.ints("pads"),
                       d = spec.ints("dilations");
  size_t spatial = data.shape.size() - 2;
  g.strides.assign(s.begin(), s.end());
  g.padL.assign(p.begin(), p.begin() + spatial);
  g.padR.assign(p.begin() + spatial, p.end());
  for (int64_t v : d)
    g.dilations.push_back(v - 1);
  g.weightDims = weight.shape;
  if (group > 1) {
    g.weightDims.insert(g.weightDims.begin(), group);
    g.weightDims[1] /= group;
  }
  return g;
}

/// The weights of the taps a convolution of one group reads, [Cout, Cin x
/// taps], from its [Cout, Cin, kh, kw] weights: gathered as oneDNN's
/// kernels convert theirs (ReorderedKernel::bind), constant weights once
/// and training weights once per parameter version; the weights as they
/// are when every tap reads.
class TapWeights {
public:
  TapWeights(const float *weight, int64_t cout, int64_t cin, int64_t kernelTaps,
             std::vector<int64_t> taps, bool constant, const uint64_t *version)
      : weight(weight), cout(cout), cin(cin), kernelTaps(kernelTaps),
        taps(std::move(taps)), constant(constant), version(version) {
    if (size() < kernelTaps)
      gathered.resize(static_cast<size_t>(cout * cin * size()));
  }
  /// The taps read (i kw + j), in the order of the gathered columns.
  const std::vector<int64_t> &read() const { return taps; }
  int64_t size() const { return static_cast<int64_t>(taps.size()); }
  /// Bytes of the gathered copy (0 when every tap reads).
  int64_t keptBytes() const {
    return static_cast<int64_t>(gathered.size() * sizeof(float));
  }
  /// The [Cout, Cin x taps] weights for this run.
  const float *current() {
    if (gathered.empty())
      return weight;
    if (gatheredOnce && (constant || (version && gatheredVersion == *version)))
      return gathered.data();
    int64_t t = size();
    parallelChunks(cout, 16, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o)
        for (int64_t c = 0; c < cin; ++c)
          for (int64_t a = 0; a < t; ++a)
            gathered[(o * cin + c) * t + a] =
                weight[(o * cin + c) * kernelTaps + taps[a]];
    });
    gatheredOnce = true;
    gatheredVersion = version ? *version : 0;
    return gathered.data();
  }

private:
  const float *weight;
  int64_t cout, cin, kernelTaps;
  std::vector<int64_t> taps;
  bool constant, gatheredOnce = false;
  const uint64_t *version;
  uint64_t gatheredVersion = 0;
  std::vector<float> gathered;
};

/// The device's TapWeights of `weight` over `taps`: one copy for every
/// kernel that reads those taps (a forward and its recompute, a
/// convolution and its input gradient), counted in the kept bytes.
std::shared_ptr<TapWeights> tapWeights(OneDnn &dnn, const float *weight,
                                       int64_t cout, int64_t cin,
                                       int64_t kernelTaps,
                                       std::vector<int64_t> taps, bool constant,
                                       const uint64_t *version) {
  std::string key = "taps " +
                    std::to_string(reinterpret_cast<uintptr_t>(weight)) + " " +
                    std::to_string(cout) + "x" + std::to_string(cin) + "x" +
                    std::to_string(kernelTaps) + (constant ? " const" : "") +
                    " v" + std::to_string(reinterpret_cast<uintptr_t>(version));
  for (int64_t t : taps)
    key += " " + std::to_string(t);
  return dnn.sharedCopy<TapWeights>(key, [&] {
    auto made = std::make_shared<TapWeights>(
        weight, cout, cin, kernelTaps, std::move(taps), constant, version);
    dnn.keptBytes += made->keptBytes();
    return made;
  });
}

/// Whether a convolution's output maps are smaller than its kernel (a
/// 3x3 on the 2x2 or 1x1 maps of ResNet's last blocks on small images).
bool mapsSmallerThanKernel(const TensorSlot &out, const TensorSlot &weight) {
  return out.shape.size() == 4 && weight.shape.size() == 4 &&
         (out.shape[2] < weight.shape[2] || out.shape[3] < weight.shape[3]);
}

/// A 2-D convolution (one group) whose output map is one pixel, and its
/// input gradient, as one product each: that pixel reads each input pixel
/// through one tap at most, so with the taps that read the map
///   y[n, co] = sum over (ci, tap) of W[co, ci, tap] x[n, ci, pixel(tap)],
/// a [N, Cin x taps] by [Cin x taps, Cout] product, and the input gradient
/// the product of the output gradient with the same gathered weights,
/// scattered to the pixels read (0 elsewhere). ResNet-18's last stage on
/// 32x32 images is such (3x3 kernels on 1x1 and 2x2 maps): oneDNN computes
/// every tap and converts the weights each step, 8.2 ms forward and 9.7 ms
/// backward for 512 channels and 32 images on one AVX2 core.
class PixelOutputConvKernel : public Kernel {
public:
  /// Whether `spec` (conv or conv_grad_input) is one this kernel computes.
  static bool applies(const KernelSpec &spec, const TensorSlot &data,
                      const TensorSlot &out) {
    return data.shape.size() == 4 && out.shape[2] == 1 && out.shape[3] == 1 &&
           static_cast<int64_t>(spec.number("group")) == 1;
  }

  PixelOutputConvKernel(const KernelSpec &spec, const KernelMemory &mem,
                        OneDnn &dnn, bool wrtInput)
      : dnn(dnn), wrtInput(wrtInput) {
    const TensorSlot &w = spec.operand("weight");
    const TensorSlot &data =
        wrtInput ? spec.result("grad_input") : spec.operand("input");
    const TensorSlot &out =
        wrtInput ? spec.operand("grad_output") : spec.result("output");
    if (wrtInput) {
      gradOutput = reinterpret_cast<const float *>(mem.address(out));
      gradInput = reinterpret_cast<float *>(mem.address(data));
    } else {
      input = reinterpret_cast<const float *>(mem.address(data));
      output = reinterpret_cast<float *>(mem.address(out));
      if (const TensorSlot *b = spec.optionalOperand("bias"))
        bias = reinterpret_cast<const float *>(mem.address(*b));
    }
    n = data.shape[0];
    cin = data.shape[1];
    h = data.shape[2];
    w_ = data.shape[3];
    cout = w.shape[0];
    kh = w.shape[2];
    kw = w.shape[3];
    Window2d win = window2d(spec);
    // The output pixel reads input (i d - pad) through tap i (any stride).
    std::vector<int64_t> taps;
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        int64_t y = i * win.dh - win.ph, x = j * win.dw - win.pw;
        if (y >= 0 && y < h && x >= 0 && x < w_) {
          taps.push_back(i * kw + j);
          pixels.push_back(y * w_ + x);
        }
      }
    k = cin * static_cast<int64_t>(taps.size());
    weights = tapWeights(dnn, reinterpret_cast<const float *>(mem.address(w)),
                         cout, cin, kh * kw, std::move(taps),
                         !wrtInput && mem.constantOf(w), mem.versionOf(w));
    columnsAt = buffers.add(static_cast<size_t>(n * k) * sizeof(float));
    dnn.workspace.reserve(buffers.bytes());
  }

  void run() override {
    int64_t t = weights->size(), hw = h * w_;
    const float *tapWeights = weights->current();
    float *columns =
        reinterpret_cast<float *>(buffers.bind(dnn.workspace) + columnsAt);
    if (wrtInput) {
      sgemm("conv_grad_input", 'N', 'N', n, k, cout, gradOutput, cout,
            tapWeights, k, 0.0f, columns, k);
      parallelChunks(n * cin, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          float *plane = gradInput + r * hw;
          std::fill_n(plane, hw, 0.0f);
          for (int64_t a = 0; a < t; ++a)
            plane[pixels[a]] = columns[r * t + a];
        }
      });
      return;
    }
    parallelChunks(n * cin, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r)
        for (int64_t a = 0; a < t; ++a)
          columns[r * t + a] = input[r * hw + pixels[a]];
    });
    if (bias)
      for (int64_t b = 0; b < n; ++b)
        std::copy_n(bias, cout, output + b * cout);
    sgemm("conv", 'N', 'T', n, cout, k, columns, k, tapWeights, k,
          bias ? 1.0f : 0.0f, output, cout);
  }

private:
  OneDnn &dnn;
  bool wrtInput;
  const float *input = nullptr, *bias = nullptr, *gradOutput = nullptr;
  float *output = nullptr, *gradInput = nullptr;
  int64_t n = 0, cin = 0, h = 0, w_ = 0, cout = 0, kh = 0, kw = 0, k = 0;
  /// The weights of the taps that read the map, and the pixels (y w + x)
  /// those taps read, in the same order.
  std::shared_ptr<TapWeights> weights;
  std::vector<int64_t> pixels;
  /// The patches (in the device's workspace).
  ScratchLayout buffers;
  size_t columnsAt = 0;
};

/// A forward convolution of one group whose output maps are smaller than
/// its kernel and hold more than one pixel (ResNet's 3x3 convolutions on
/// the 2x2 maps of small images): the patches of every output position
/// (the taps that read the map at some position, zeros where one reads
/// padding) times the taps' weights, one sgemm, its [images x positions,
/// Cout] result laid out as NCHW. oneDNN's AVX-512 direct kernel computes
/// every tap over the padding there: 256 channels on 2x2 maps, 32 images,
/// 2.9 ms on one core (its gemm implementation 5.3).
class SmallMapConvKernel : public Kernel {
public:
  static bool applies(const KernelSpec &spec, const TensorSlot &data,
                      const TensorSlot &out, const TensorSlot &weight) {
    return data.shape.size() == 4 &&
           static_cast<int64_t>(spec.number("group")) == 1 &&
           mapsSmallerThanKernel(out, weight) &&
           out.shape[2] * out.shape[3] > 1;
  }

  SmallMapConvKernel(const KernelSpec &spec, const KernelMemory &mem,
                     OneDnn &dnn)
      : dnn(dnn) {
    const TensorSlot &x = spec.operand("input"), &w = spec.operand("weight");
    const TensorSlot &y = spec.result("output");
    input = reinterpret_cast<const float *>(mem.address(x));
    output = reinterpret_cast<float *>(mem.address(y));
    if (const TensorSlot *b = spec.optionalOperand("bias"))
      bias = reinterpret_cast<const float *>(mem.address(*b));
    n = x.shape[0];
    cin = x.shape[1];
    h = x.shape[2];
    w_ = x.shape[3];
    cout = w.shape[0];
    positions = y.shape[2] * y.shape[3];
    Window2d win = window2d(spec);
    // For each tap and output position, the pixel it reads or -1.
    std::vector<int64_t> taps;
    std::vector<std::vector<int64_t>> reads;
    for (int64_t i = 0; i < w.shape[2]; ++i)
      for (int64_t j = 0; j < w.shape[3]; ++j) {
        std::vector<int64_t> at;
        bool any = false;
        for (int64_t oy = 0; oy < y.shape[2]; ++oy)
          for (int64_t ox = 0; ox < y.shape[3]; ++ox) {
            int64_t iy = oy * win.sh - win.ph + i * win.dh;
            int64_t ix = ox * win.sw - win.pw + j * win.dw;
            bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w_;
            at.push_back(inside ? iy * w_ + ix : -1);
            any = any || inside;
          }
        if (any) {
          taps.push_back(i * w.shape[3] + j);
          reads.push_back(std::move(at));
        }
      }
    t = static_cast<int64_t>(taps.size());
    pixelOf.resize(static_cast<size_t>(positions * t));
    for (int64_t p = 0; p < positions; ++p)
      for (int64_t a = 0; a < t; ++a)
        pixelOf[p * t + a] = reads[a][p];
    k = cin * t;
    weights = tapWeights(dnn, reinterpret_cast<const float *>(mem.address(w)),
                         cout, cin, w.shape[2] * w.shape[3], std::move(taps),
                         mem.constantOf(w), mem.versionOf(w));
    columnsAt =
        buffers.add(static_cast<size_t>(n * positions * k) * sizeof(float));
    productAt =
        buffers.add(static_cast<size_t>(n * positions * cout) * sizeof(float));
    dnn.workspace.reserve(buffers.bytes());
  }

  void run() override {
    const float *tapWeights = weights->current();
    char *base = buffers.bind(dnn.workspace);
    float *columns = reinterpret_cast<float *>(base + columnsAt);
    float *product = reinterpret_cast<float *>(base + productAt);
    int64_t hw = h * w_;
    // One row of patches per (image, output position).
    parallelChunks(n * positions, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        int64_t b = r / positions, p = r % positions;
        const int64_t *pixels = pixelOf.data() + p * t;
        float *row = columns + r * k;
        for (int64_t c = 0; c < cin; ++c) {
          const float *plane = input + (b * cin + c) * hw;
          for (int64_t a = 0; a < t; ++a)
            row[c * t + a] = pixels[a] >= 0 ? plane[pixels[a]] : 0.0f;
        }
      }
    });
    sgemm("conv", 'N', 'T', n * positions, cout, k, columns, k, tapWeights, k,
          0.0f, product, cout);
    parallelChunks(n * cout, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        int64_t b = r / cout, o = r % cout;
        float shift = bias ? bias[o] : 0.0f;
        float *plane = output + r * positions;
        for (int64_t p = 0; p < positions; ++p)
          plane[p] = product[(b * positions + p) * cout + o] + shift;
      }
    });
  }

private:
  OneDnn &dnn;
  const float *input = nullptr, *bias = nullptr;
  float *output = nullptr;
  int64_t n = 0, cin = 0, h = 0, w_ = 0, cout = 0, positions = 0;
  int64_t t = 0, k = 0;
  /// The weights of the taps that read the map somewhere; for each output
  /// position and tap the pixel (y w + x) it reads, -1 for padding.
  std::shared_ptr<TapWeights> weights;
  std::vector<int64_t> pixelOf;
  /// The patches and their product (in the device's workspace).
  ScratchLayout buffers;
  size_t columnsAt = 0, productAt = 0;
};

/// A 2-D convolution of one group at stride 1 without dilation whose input
/// has at most kNarrowConvChannelsAtMost channels (isNarrowConv2d; the cost
/// model's family "narrow_conv": an image model's first layer), computed by the
/// backend's own loops over the plain tensors (NarrowConvPlanes.h). oneDNN
/// blocks channels by 8 or 16 and converts such a layer's maps to and from its
/// layouts every run: the 1 -> 8 channel 3x3 layer of a small CNN on 28x28
/// maps, 32 images, took 0.14 ms forward plus 0.10 ms to convert its output
/// back, and 0.06 ms for its weights' gradient plus 0.08 ms to convert the
/// output gradient (one AVX-512 core, ONEDNN_VERBOSE); here it reads and
/// writes each tensor once.
int64_t roundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

class NarrowConvShape {
public:
  static bool applies(const KernelSpec &spec, const TensorSlot &input,
                      const TensorSlot &weight, const TensorSlot &output) {
    if (input.shape.size() != 4 || weight.shape.size() != 4 ||
        output.shape.size() != 4 || input.dtype != DType::F32)
      return false;
    Window2d win = window2d(spec);
    if (!isNarrowConv2d(input.shape[1],
                        static_cast<int64_t>(spec.number("group")), win.sh,
                        win.sw, win.dh, win.dw) ||
        win.ph < 0 || win.pw < 0)
      return false;
    // The padding after the maps: what the output's size leaves.
    int64_t hp = output.shape[2] + weight.shape[2] - 1;
    int64_t wp = output.shape[3] + weight.shape[3] - 1;
    return hp >= win.ph + input.shape[2] && wp >= win.pw + input.shape[3];
  }

  NarrowConvShape(const KernelSpec &spec, const TensorSlot &input,
                  const TensorSlot &weight, const TensorSlot &output)
      : n(input.shape[0]), cin(input.shape[1]), h(input.shape[2]),
        w(input.shape[3]), cout(weight.shape[0]), oh(output.shape[2]),
        ow(output.shape[3]), hp(oh + weight.shape[2] - 1),
        wp(ow + weight.shape[3] - 1) {
    Window2d win = window2d(spec);
    top = win.ph;
    left = win.pw;
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t i = 0; i < weight.shape[2]; ++i)
        for (int64_t j = 0; j < weight.shape[3]; ++j)
          offsets.push_back((c * hp + i) * wp + j);
    // A pass reads up to kNarrowConvLanes plus the kernel's width past the
    // planes (NarrowConvPlanes.h).
    paddedFloats = cin * hp * wp + kNarrowConvLanes + weight.shape[3];
  }

  /// Image `b` of x ([N, cin, h, w]) in `padded` (paddedFloats floats): its
  /// planes at (top, left) of zeroed [cin, hp, wp] planes.
  void pad(const float *x, int64_t b, float *padded) const {
    std::fill_n(padded, paddedFloats, 0.0f);
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t y = 0; y < h; ++y)
        std::copy_n(x + ((b * cin + c) * h + y) * w, w,
                    padded + (c * hp + y + top) * wp + left);
  }

  int64_t taps() const { return static_cast<int64_t>(offsets.size()); }

  int64_t n, cin, h, w, cout, oh, ow, hp, wp, top = 0, left = 0;
  /// Where tap (c, i, j) of the weights reads the padded planes, in the
  /// weights' order.
  std::vector<int64_t> offsets;
  int64_t paddedFloats = 0;
};

class NarrowConvKernel : public Kernel {
public:
  NarrowConvKernel(const KernelSpec &spec, const KernelMemory &mem)
      : shape(spec, spec.operand("input"), spec.operand("weight"),
              spec.result("output")) {
    input = floats(mem, spec.operand("input"));
    weights = floats(mem, spec.operand("weight"));
    if (const TensorSlot *b = spec.optionalOperand("bias"))
      bias = floats(mem, *b);
    output = floats(mem, spec.result("output"));
    int64_t channels = roundUp(shape.cout, kNarrowConvChannels);
    blockWeights.assign(static_cast<size_t>(channels * shape.taps()), 0.0f);
    blockBias.assign(static_cast<size_t>(channels), 0.0f);
  }

  void run() override {
    const NarrowConvShape &s = shape;
    constexpr int64_t k = kNarrowConvChannels;
    int64_t taps = s.taps(), plane = s.oh * s.ow;
    // The weights and biases of whole blocks of k channels (zeros past
    // the last channel).
    std::copy_n(weights, s.cout * taps, blockWeights.begin());
    if (bias)
      std::copy_n(bias, s.cout, blockBias.begin());
    // Images over the cores; each output once, its taps in order.
    parallelChunks(s.n, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> padded(static_cast<size_t>(s.paddedFloats));
      for (int64_t b = lo; b < hi; ++b) {
        s.pad(input, b, padded.data());
        for (int64_t o = 0; o < s.cout; o += k)
          narrowConvPlanes(padded.data(), s.wp, s.offsets.data(),
                           blockWeights.data() + o * taps, taps,
                           blockBias.data() + o, std::min(k, s.cout - o),
                           output + (b * s.cout + o) * plane, plane, s.oh,
                           s.ow);
      }
    });
  }

private:
  NarrowConvShape shape;
  const float *input = nullptr, *weights = nullptr, *bias = nullptr;
  float *output = nullptr;
  std::vector<float> blockWeights, blockBias;
};

/// The weights' gradient of a NarrowConvShape convolution: for each output
/// channel and tap, the sum over the images of the output gradient's plane
/// (at the padded width, zeros past its rows) dotted with the padded input
/// shifted by the tap. Output channels over the cores, each summed by one
/// thread over the images in order: the result does not depend on the
/// thread count.
class NarrowConvGradWeightKernel : public Kernel {
public:
  NarrowConvGradWeightKernel(const KernelSpec &spec, const KernelMemory &mem)
      : shape(spec, spec.operand("input"), spec.result("grad_weight"),
              spec.operand("grad_output")) {
    input = floats(mem, spec.operand("input"));
    gradOutput = floats(mem, spec.operand("grad_output"));
    gradWeight = floats(mem, spec.result("grad_weight"));
  }

  void run() override {
    const NarrowConvShape &s = shape;
    constexpr int64_t k = kNarrowConvChannels;
    int64_t taps = s.taps();
    int64_t count = roundUp(s.oh * s.wp, kNarrowConvLanes);
    parallelChunks(s.cout, 1, [&](int64_t lo, int64_t hi) {
      std::vector<float> padded(static_cast<size_t>(s.paddedFloats));
      // k channels' planes at the padded width (zeros past each row, and
      // for the channels past the last).
      std::vector<float> rows(static_cast<size_t>(k * count), 0.0f);
      std::vector<double> sums(static_cast<size_t>(roundUp(hi - lo, k) * taps),
                               0.0);
      for (int64_t b = 0; b < s.n; ++b) {
        s.pad(input, b, padded.data());
        for (int64_t o = lo; o < hi; o += k) {
          for (int64_t c = 0; c < k; ++c) {
            float *row = rows.data() + c * count;
            if (o + c >= hi) {
              std::fill_n(row, count, 0.0f);
              continue;
            }
            const float *plane =
                gradOutput + (b * s.cout + o + c) * s.oh * s.ow;
            for (int64_t y = 0; y < s.oh; ++y)
              std::copy_n(plane + y * s.ow, s.ow, row + y * s.wp);
          }
          narrowConvTapSums(rows.data(), count, padded.data(), s.offsets.data(),
                            taps, sums.data() + (o - lo) * taps);
        }
      }
      for (int64_t i = 0; i < (hi - lo) * taps; ++i)
        gradWeight[lo * taps + i] = static_cast<float>(sums[i]);
    });
  }

private:
  NarrowConvShape shape;
  const float *input = nullptr, *gradOutput = nullptr;
  float *gradWeight = nullptr;
};

constexpr memory::data_type f32 = memory::data_type::f32;

/// Output positions from which a pointwise convolution runs on the plain
/// tensors (plainPointwise).
constexpr int64_t kPlainPointwisePositions = 64;

/// Whether a convolution is pointwise (2-D, a 1x1 kernel at stride 1
/// without padding, one group) on maps of at least
/// kPlainPointwisePositions positions, in float32 on a CPU without
/// AVX-512: then oneDNN runs it on the plain tensors (a gemm per image,
/// x64:gemm:jit) rather than in channel blocks with the maps converted to
/// them and back. On a Zen 3 core (AVX2), forward, input and weight
/// gradient together, conversions included: MobileNet V2's 16 -> 96 on
/// 16x16 maps (32 images) 1.46 -> 0.95 ms, 96 -> 24 on 8x8 0.48 -> 0.37;
/// on 4x4 maps the same, on 2x2 blocked is faster (0.19 against 0.30 ms).
/// Where oneDNN's kernels are AVX-512's (avx512Kernels) not measured:
/// channel blocks there.
bool plainPointwise(const KernelSpec &spec, const TensorSlot &input,
                    const TensorSlot &weight, const TensorSlot &output,
                    memory::data_type type) {
  if (type != f32 || input.shape.size() != 4 || weight.shape.size() != 4 ||
      output.shape.size() != 4 || weight.shape[2] != 1 ||
      weight.shape[3] != 1 || static_cast<int64_t>(spec.number("group")) != 1)
    return false;
  Window2d win = window2d(spec);
  return win.sh == 1 && win.sw == 1 && win.ph == 0 && win.pw == 0 &&
         input.shape[2] == output.shape[2] &&
         input.shape[3] == output.shape[3] &&
         output.shape[2] * output.shape[3] >= kPlainPointwisePositions &&
         !avx512Kernels();
}

/// The layout a convolution's activation operand is given to oneDNN in:
/// its own plain one where `plain`, else oneDNN's pick.
memory::desc activationLayout(const memory &m, memory::data_type type,
                              bool plain) {
  return plain ? m.get_desc() : anyLayout(m, type);
}

std::unique_ptr<Kernel> createConv(const KernelSpec &spec,
                                   const KernelMemory &mem, OneDnn &dnn) {
  const TensorSlot &x = spec.operand("input"), &w = spec.operand("weight");
  const TensorSlot *b = spec.optionalOperand("bias");
  checkConv(spec, x, w, spec.result("output"));
  // A first layer of few channels runs as the backend's own float32 loops
  // whatever the compute type (NarrowConvShape: a hundredth of a net's
  // work, and the image as given); the other special kernels are float32
  // products, left out in bfloat16.
  memory::data_type type = productType(spec);
  bool bf16 = type == memory::data_type::bf16;
  if (NarrowConvShape::applies(spec, x, w, spec.result("output")))
    return std::make_unique<NarrowConvKernel>(spec, mem);
  if (!bf16 && PixelOutputConvKernel::applies(spec, x, spec.result("output")))
    return std::make_unique<PixelOutputConvKernel>(spec, mem, dnn,
                                                   /*wrtInput=*/false);
  if (!bf16 && SmallMapConvKernel::applies(spec, x, spec.result("output"), w))
    return std::make_unique<SmallMapConvKernel>(spec, mem, dnn);
  bool plain = plainPointwise(spec, x, w, spec.result("output"), type);
  ConvGeometry g = convGeometry(spec, x, w);
  memory src = bindSlot(spec, x, mem, dnn);
  memory weights = bindSlot(spec, w, mem, dnn, g.weightDims);
  memory dst = bindSlot(spec, spec.result("output"), mem, dnn);
  std::optional<memory> bias;
  if (b)
    bias = bindSlot(spec, *b, mem, dnn);
  // In bfloat16: the input and weights rounded, the result and the bias
  // float32.
  auto desc =
      bias ? dnnl::convolution_forward::desc(
                 dnnl::prop_kind::forward_inference,
                 dnnl::algorithm::convolution_direct,
                 activationLayout(src, type, plain), anyLayout(weights, type),
                 bias->get_desc(), activationLayout(dst, f32, plain), g.strides,
                 g.dilations, g.padL, g.padR)
           : dnnl::convolution_forward::desc(
                 dnnl::prop_kind::forward_inference,
                 dnnl::algorithm::convolution_direct,
                 activationLayout(src, type, plain), anyLayout(weights, type),
                 activationLayout(dst, f32, plain), g.strides, g.dilations,
                 g.padL, g.padR);
  dnnl::convolution_forward::primitive_desc pd(desc, dnn.attr, dnn.engine);
  auto kernel =
      std::make_unique<ReorderedKernel>(dnn, dnnl::convolution_forward(pd));
  kernel->bind(DNNL_ARG_SRC, src, pd.src_desc(), false);
  // Weights never change in inference, and only between steps in training
  // (every micro-batch of a step reads the same converted copy).
  kernel->bind(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false,
               mem.constantOf(w), mem.versionOf(w));
  if (bias)
    kernel->bind(DNNL_ARG_BIAS, *bias, bias->get_desc(), false);
  kernel->bind(DNNL_ARG_DST, dst, pd.dst_desc(), true);
  return kernel;
}

/// ceil(a / b) for b > 0 and any sign of a.
int64_t ceilDiv(int64_t a, int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/// What a 2-D convolution's weight-gradient kernel of the backend's own
/// reads: the plain input, output gradient and weight gradient, and the
/// geometry (ONNX's strides, leading pads and dilations).
class GradWeight2dKernel : public Kernel {
protected:
  GradWeight2dKernel(const KernelSpec &spec, const KernelMemory &mem)
      : win(window2d(spec)) {
    const TensorSlot &x = spec.operand("input");
    const TensorSlot &dy = spec.operand("grad_output");
    const TensorSlot &dw = spec.result("grad_weight");
    input = reinterpret_cast<const float *>(mem.address(x));
    gradOutput = reinterpret_cast<const float *>(mem.address(dy));
    gradWeight = reinterpret_cast<float *>(mem.address(dw));
    groups = static_cast<int64_t>(spec.number("group"));
    n = x.shape[0];
    c = x.shape[1];
    h = x.shape[2];
    w = x.shape[3];
    cout = dy.shape[1];
    oh = dy.shape[2];
    ow = dy.shape[3];
    kh = dw.shape[2];
    kw = dw.shape[3];
  }

  const float *input = nullptr, *gradOutput = nullptr;
  float *gradWeight = nullptr;
  int64_t groups = 1, n = 0, c = 0, h = 0, w = 0, cout = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0;
  Window2d win;
};

/// The weight gradient of a depthwise 2-D convolution (one input and one
/// output channel per group) as a direct loop over the plain tensors, for
/// where oneDNN has no depthwise kernel and falls back to a gemm per group:
/// MobileNet's 3x3 depthwise layers on 1x1 and 2x2 maps (kernel larger than
/// the map) took 3.8 ms each that way, for 0.3 M multiply-adds. Each
/// channel is summed by one thread in one order (batch, then the map): the
/// result does not depend on the thread count.
class DepthwiseGradWeightKernel : public GradWeight2dKernel {
public:
  DepthwiseGradWeightKernel(const KernelSpec &spec, const KernelMemory &mem)
      : GradWeight2dKernel(spec, mem) {}
  void run() override {
    // Each thread a contiguous range of channels, the batch outermost so
    // that consecutive channels' maps are read one after the other; every
    // output element once, adding its products into its channel's taps.
    int64_t k = kh * kw;
    parallelChunks(c, 1, [&](int64_t first, int64_t last) {
      std::vector<double> taps(static_cast<size_t>((last - first) * k), 0.0);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = first; ch < last; ++ch) {
          const float *xs = input + (b * c + ch) * h * w;
          const float *gs = gradOutput + (b * c + ch) * oh * ow;
          double *acc = taps.data() + (ch - first) * k;
          for (int64_t y = 0; y < oh; ++y)
            for (int64_t x = 0; x < ow; ++x) {
              double g = gs[y * ow + x];
              for (int64_t i = 0; i < kh; ++i) {
                int64_t iy = y * win.sh - win.ph + i * win.dh;
                if (iy < 0 || iy >= h)
                  continue;
                for (int64_t j = 0; j < kw; ++j) {
                  int64_t ix = x * win.sw - win.pw + j * win.dw;
                  if (ix >= 0 && ix < w)
                    acc[i * kw + j] += g * xs[iy * w + ix];
                }
              }
            }
        }
      for (int64_t i = 0; i < (last - first) * k; ++i)
        gradWeight[first * k + i] = static_cast<float>(taps[i]);
    });
  }
};

/// The weight gradient of a 2-D convolution as matrix products over many
/// images at once, per group g:
///   dW_g[Cout_g, Cin_g T] += dY_g[Cout_g, R] x col_g[R, Cin_g T],
/// R the output positions of a chunk of images, col_g their input patches
/// (im2col) over the T taps that read the map somewhere (a 3x3 kernel on a
/// 1x1 map with padding 1 reads it with its centre only; the other taps'
/// gradients are 0). For where oneDNN's backward-weights primitive is its
/// gemm fallback (x64:gemm:jit, which oneDNN 2.6 picks on CPUs without
/// AVX-512 for 3x3 kernels on 1x1 and 2x2 maps, ResNet's last blocks on
/// small images): that fallback multiplies image by image, a product of
/// inner dimension OH x OW (1 or 4 there), so a 512 x 4608 gradient is read
/// and written once per image: 60 ms for one layer on one core, against
/// 0.3 ms here. A chunk's patches take at most kChunkFloats floats (at
/// least one image); the chunks are added in order, so the result depends
/// on the shapes and the thread count only, as oneDNN's does.
class Im2colGradWeightKernel : public GradWeight2dKernel {
public:
  static constexpr int64_t kChunkFloats = int64_t(1) << 20;

  Im2colGradWeightKernel(const KernelSpec &spec, const KernelMemory &mem,
                         OneDnn &dnn)
      : GradWeight2dKernel(spec, mem), dnn(dnn) {
    // The taps that read the map at some output position.
    auto reads = [](int64_t tap, int64_t out, int64_t stride, int64_t pad,
                    int64_t dilation, int64_t size) {
      for (int64_t o = 0; o < out; ++o)
        if (int64_t at = o * stride - pad + tap * dilation;
            at >= 0 && at < size)
          return true;
      return false;
    };
    for (int64_t i = 0; i < kh; ++i)
      if (reads(i, oh, win.sh, win.ph, win.dh, h))
        tapsY.push_back(i);
    for (int64_t j = 0; j < kw; ++j)
      if (reads(j, ow, win.sw, win.pw, win.dw, w))
        tapsX.push_back(j);
    int64_t taps = static_cast<int64_t>(tapsY.size() * tapsX.size());
    patch = (c / groups) * taps;
    images = std::clamp<int64_t>(
        kChunkFloats / std::max<int64_t>(1, patch * oh * ow), 1, n);
    auto floats = [](int64_t count) {
      return static_cast<size_t>(count) * sizeof(float);
    };
    columnsAt = buffers.add(floats(images * oh * ow * patch));
    rowsAt = buffers.add(floats((cout / groups) * images * oh * ow));
    compacted = taps < kh * kw;
    if (compacted)
      compactAt = buffers.add(floats((cout / groups) * patch));
    dnn.workspace.reserve(buffers.bytes());
  }

  void run() override {
    int64_t cg = c / groups, og = cout / groups, positions = oh * ow;
    int64_t taps = kh * kw;
    char *base = buffers.bind(dnn.workspace);
    float *columns = reinterpret_cast<float *>(base + columnsAt);
    float *rows = reinterpret_cast<float *>(base + rowsAt);
    float *compact =
        compacted ? reinterpret_cast<float *>(base + compactAt) : nullptr;
    for (int64_t g = 0; g < groups; ++g) {
      float *full = gradWeight + g * og * cg * taps;
      float *target = compacted ? compact : full;
      for (int64_t first = 0; first < n; first += images) {
        int64_t count = std::min(images, n - first);
        int64_t r = count * positions;
        // dY_g of the chunk as [Cout_g, R].
        parallelChunks(og, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t o = lo; o < hi; ++o)
            for (int64_t b = 0; b < count; ++b)
              std::copy_n(gradOutput +
                              ((first + b) * cout + g * og + o) * positions,
                          positions, rows + o * r + b * positions);
        });
        // The patches, one row per output position, a line of outputs
        // (y) at a time: each tap's column over the line is the input row
        // it reads at stride sw, zeros where it reads padding.
        parallelChunks(count * oh, 1, [&](int64_t lo, int64_t hi) {
          for (int64_t line = lo; line < hi; ++line) {
            int64_t b = first + line / oh, y = line % oh;
            float *out = columns + line * ow * patch;
            for (int64_t k = 0; k < cg; ++k) {
              const float *plane = input + (b * c + g * cg + k) * h * w;
              for (int64_t i : tapsY) {
                int64_t iy = y * win.sh - win.ph + i * win.dh;
                bool inside = iy >= 0 && iy < h;
                for (int64_t j : tapsX) {
                  // Output z reads input column z sw + offset.
                  int64_t offset = j * win.dw - win.pw;
                  int64_t lo = 0, hi = 0;
                  if (inside) {
                    lo = std::min(
                        ow, ceilDiv(std::max<int64_t>(0, -offset), win.sw));
                    hi = std::clamp<int64_t>(ceilDiv(w - offset, win.sw), lo,
                                             ow);
                  }
                  const float *row = inside ? plane + iy * w : plane;
                  int64_t z = 0;
                  for (; z < lo; ++z)
                    out[z * patch] = 0.0f;
                  for (; z < hi; ++z)
                    out[z * patch] = row[z * win.sw + offset];
                  for (; z < ow; ++z)
                    out[z * patch] = 0.0f;
                  ++out;
                }
              }
            }
          }
        });
        sgemm("conv_grad_weight", 'N', 'N', og, patch, r, rows, r, columns,
              patch, first == 0 ? 0.0f : 1.0f, target, patch);
      }
      if (!compacted)
        continue;
      // The taps that read nothing have no gradient: one pass over the
      // group's gradient, a row of taps at a time.
      int64_t used = static_cast<int64_t>(tapsX.size());
      int64_t perRow = patch / cg;
      parallelChunks(og * cg, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row) {
          float *out = full + row * taps;
          std::fill_n(out, taps, 0.0f);
          const float *in = compact + row * perRow;
          for (size_t a = 0; a < tapsY.size(); ++a)
            for (int64_t e = 0; e < used; ++e)
              out[tapsY[a] * kw + tapsX[e]] =
                  in[static_cast<int64_t>(a) * used + e];
        }
      });
    }
  }

private:
  OneDnn &dnn;
  std::vector<int64_t> tapsY, tapsX;
  int64_t patch = 0;  // columns of a group's product: Cin_g x used taps
  int64_t images = 1; // per chunk
  /// The patches, the output gradient's rows and the gradient of the taps
  /// that read (in the device's workspace).
  ScratchLayout buffers;
  size_t columnsAt = 0, rowsAt = 0, compactAt = 0;
  bool compacted = false;
};

/// Whether a weight gradient is of a depthwise 2-D convolution.
bool isDepthwise2d(const KernelSpec &spec, const TensorSlot &input,
                   const TensorSlot &weight) {
  return input.shape.size() == 4 && weight.shape.size() == 4 &&
         weight.shape[1] == 1 &&
         static_cast<int64_t>(spec.number("group")) == input.shape[1] &&
         weight.shape[0] == input.shape[1];
}

/// Whether a convolution is 2-D with one group and one input channel (an
/// image model's first layer on grey images). oneDNN's AVX2 direct kernel
/// pads the channels to its block of 8: the main job's 1 -> 16 channel
/// 3x3 layer on 28x28 maps, 32 images, took 1.7 ms for its weight gradient
/// on one AVX2 core, the patches' product 0.75 ms. From 2 channels on the
/// two were even and from 3 oneDNN was faster (3 -> 16 3x3: 0.8 against
/// 1.6-2.3 ms; ResNet's 3 -> 64 7x7/2 stem: 2.3-4.0 against 4.8 ms). Its
/// AVX-512 kernel is faster than the patches' product even for one channel
/// (the same layer, one AVX-512 Intel core: 0.33-0.36 against 0.44 ms), so
/// only where oneDNN's kernel is not an AVX-512 one does the backend
/// multiply the patches.
bool isSingleChannel2d(const KernelSpec &spec, const TensorSlot &input) {
  return input.shape.size() == 4 && input.shape[1] == 1 &&
         static_cast<int64_t>(spec.number("group")) == 1;
}

/// Gradients of a convolution: with respect to its input (backward data)
/// or its weights (backward weights). oneDNN picks blocked layouts (its
/// plain-layout backward is an im2col gemm, several times slower).
std::unique_ptr<Kernel> createConvGrad(const KernelSpec &spec,
                                       const KernelMemory &mem, OneDnn &dnn,
                                       bool wrtInput) {
  const TensorSlot &gradOut = spec.operand("grad_output");
  const TensorSlot &other = spec.operand(wrtInput ? "weight" : "input");
  const TensorSlot &result =
      spec.result(wrtInput ? "grad_input" : "grad_weight");
  checkConv(spec, gradOut, other, result);
  const TensorSlot &data = wrtInput ? result : other;
  // bfloat16 as in createConv: the narrow first layer's loops stay, the
  // other float32 kernels are left out.
  memory::data_type type = productType(spec);
  bool bf16 = type == memory::data_type::bf16;
  if (!bf16 && wrtInput && PixelOutputConvKernel::applies(spec, data, gradOut))
    return std::make_unique<PixelOutputConvKernel>(spec, mem, dnn,
                                                   /*wrtInput=*/true);
  const TensorSlot &weight = wrtInput ? other : result;
  if (!wrtInput && NarrowConvShape::applies(spec, data, weight, gradOut))
    return std::make_unique<NarrowConvGradWeightKernel>(spec, mem);
  // The weights' gradient on maps smaller than the kernel: the patches'
  // product, whatever oneDNN's kernel (so none is built): its AVX-512 direct
  // kernel computes every tap over the padding (ResNet-18 on 32x32 images,
  // one AVX-512 core: a 512-channel 3x3 on 1x1 maps 9.3 -> 3.4 ms for both
  // gradients, 256 channels on 2x2 maps 4.7 -> 3.3 ms; its step 127 -> 102
  // ms). (Its gemm implementation was slower still.)
  if (!bf16 && !wrtInput && !isDepthwise2d(spec, data, weight) &&
      mapsSmallerThanKernel(gradOut, weight))
    return std::make_unique<Im2colGradWeightKernel>(spec, mem, dnn);
  bool plain = plainPointwise(spec, data, weight, gradOut, type);
  ConvGeometry g = convGeometry(spec, data, weight);
  memory src = bindSlot(spec, data, mem, dnn);
  memory weights = bindSlot(spec, weight, mem, dnn, g.weightDims);
  memory dst = bindSlot(spec, gradOut, mem, dnn);
  // In bfloat16 the operands are rounded (the output gradient, and the
  // weights or the input), the gradient computed is float32.
  dnnl::convolution_forward::desc fwd(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
      activationLayout(src, type, plain), anyLayout(weights, type),
      activationLayout(dst, type, plain), g.strides, g.dilations, g.padL,
      g.padR);
  dnnl::convolution_forward::primitive_desc hint(fwd, dnn.attr, dnn.engine);
  if (wrtInput) {
    dnnl::convolution_backward_data::desc desc(
        dnnl::algorithm::convolution_direct, activationLayout(src, f32, plain),
        anyLayout(weights, type), activationLayout(dst, type, plain), g.strides,
        g.dilations, g.padL, g.padR);
    dnnl::convolution_backward_data::primitive_desc pd(desc, dnn.attr,
                                                       dnn.engine, hint);
    auto kernel = std::make_unique<ReorderedKernel>(
        dnn, dnnl::convolution_backward_data(pd));
    kernel->bind(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
    kernel->bind(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), false, false,
                 mem.versionOf(weight));
    kernel->bind(DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), true);
    return kernel;
  }
  dnnl::convolution_backward_weights::desc desc(
      dnnl::algorithm::convolution_direct, activationLayout(src, type, plain),
      anyLayout(weights), activationLayout(dst, type, plain), g.strides,
      g.dilations, g.padL, g.padR);
  dnnl::convolution_backward_weights::primitive_desc pd(desc, dnn.attr,
                                                        dnn.engine, hint);
  std::string impl = pd.impl_info_str();
  if (!bf16 && isSingleChannel2d(spec, data) &&
      impl.find("avx512") == std::string::npos)
    return std::make_unique<Im2colGradWeightKernel>(spec, mem, dnn);
  // (A plain pointwise one is oneDNN's gemm: one product per image of
  // inner dimension the map's positions, at least kPlainPointwisePositions.)
  if (!bf16 && !plain && impl.find("gemm") != std::string::npos &&
      data.shape.size() == 4) {
    if (isDepthwise2d(spec, data, weight))
      return std::make_unique<DepthwiseGradWeightKernel>(spec, mem);
    return std::make_unique<Im2colGradWeightKernel>(spec, mem, dnn);
  }
  auto kernel = std::make_unique<ReorderedKernel>(
      dnn, dnnl::convolution_backward_weights(pd));
  kernel->bind(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), false);
  kernel->bind(DNNL_ARG_SRC, src, pd.src_desc(), false);
  kernel->bind(DNNL_ARG_DIFF_WEIGHTS, weights, pd.diff_weights_desc(), true);
  return kernel;
}

std::unique_ptr<Kernel> createConvGradInput(const KernelSpec &spec,
                                            const KernelMemory &mem,
                                            OneDnn &dnn) {
  return createConvGrad(spec, mem, dnn, /*wrtInput=*/true);
}

std::unique_ptr<Kernel> createConvGradWeight(const KernelSpec &spec,
                                             const KernelMemory &mem,
                                             OneDnn &dnn) {
  return createConvGrad(spec, mem, dnn, /*wrtInput=*/false);
}

} // namespace

std::vector<KernelFactoryEntry> convKernels() {
  return {{"conv", createConv},
          {"conv_grad_input", createConvGradInput},
          {"conv_grad_weight", createConvGradWeight}};
}

} // namespace gpipe::runtime::cpu
