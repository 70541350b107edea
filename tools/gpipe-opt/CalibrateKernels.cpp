//===- CalibrateKernels.cpp - Timing gpipe's own kernels ------------------===//
#include "CalibrateKernels.h"
#include "Calibrate.h"

#include "Analysis/CostModel.h"
#include "Analysis/Planner/LayerTable.h"
#include "Driver/CompileModel.h"
#include "Import/ONNX/ModelImporter.h"
#include "Pipelines/Pipelines.h"
#include "Transforms/Passes.h"

#include "gpipe/common/KernelFamily.h"
#include "gpipe/runtime/RuntimeInfo.h"
#include "gpipe/runtime/TrainingSession.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>

using namespace gpipe;

namespace {

/// An ONNX graph under construction, with random initializers.
class GraphBuilder {
public:
  explicit GraphBuilder(std::mt19937 &rng) : rng(rng) {
    model.set_ir_version(8);
    model.add_opset_import()->set_version(17);
    graph = model.mutable_graph();
    graph->set_name("calibration");
  }
  void input(const std::string &name, std::vector<int64_t> dims) {
    auto *v = graph->add_input();
    v->set_name(name);
    auto *t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims)
      t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void output(const std::string &name) {
    auto *v = graph->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
  }
  /// A float initializer: `fill` for every element, or normal noise of
  /// standard deviation `scale` when fill is NaN.
  std::string init(const std::string &name, std::vector<int64_t> dims,
                   float scale, float fill = NAN) {
    auto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    std::normal_distribution<float> normal(0.0f, scale);
    for (int64_t i = 0; i < n; ++i)
      t->add_float_data(std::isnan(fill) ? normal(rng) : fill);
    return name;
  }
  /// A boolean scalar initializer.
  std::string flag(const std::string &name, bool value) {
    auto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::BOOL);
    t->add_int32_data(value);
    return name;
  }
  std::string ints(const std::string &name, std::vector<int64_t> values) {
    auto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values)
      t->add_int64_data(v);
    return name;
  }
  /// A float scalar as a Constant node (what exporters write for a
  /// literal), not an initializer: trained, it would be no constant.
  std::string scalar(const std::string &name, float value) {
    onnx::NodeProto *n = node("Constant", name, {});
    auto *a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(value);
    return name;
  }
  onnx::NodeProto *node(const std::string &type, const std::string &name,
                        std::vector<std::string> inputs) {
    auto *n = graph->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (const std::string &i : inputs)
      n->add_input(i);
    n->add_output(name);
    return n;
  }
  static void attr(onnx::NodeProto *n, const std::string &name,
                   std::vector<int64_t> values, bool list = true) {
    auto *a = n->add_attribute();
    a->set_name(name);
    if (list) {
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : values)
        a->add_ints(v);
    } else {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(values.front());
    }
  }
  bool write(const std::string &path) const {
    std::ofstream out(path, std::ios::binary);
    return model.SerializeToOstream(&out);
  }

private:
  std::mt19937 &rng;
  onnx::ModelProto model;
  onnx::GraphProto *graph;
};

/// [B, I, H, H] (I = 1 or 3 channels: the first convolution a narrow one,
/// as an image model's): two Conv 3x3 + BatchNorm + ReLU blocks of C channels,
/// dropout, poolings (2x2 and 3x3 max, 2x2 average, summed), three of 8
/// channels in or out (C -> 8 -> 8 -> C),
/// one of 2C, a depthwise one of 2C, a pointwise
/// (1x1) one, an average pooling, a strided depthwise one and a 3x3 one on
/// what it leaves
/// (MobileNet's and ResNet's shapes; on the smallest maps smaller than
/// the kernel),
/// global average pooling and a classifier.
void convNet(GraphBuilder &g, int64_t b, int64_t c, int64_t h,
             int64_t channels) {
  g.input("x", {b, channels, h, h});
  std::string x = "x";
  auto block = [&](const std::string &tag, int64_t in, int64_t out,
                   int64_t group = 1, int64_t kernel = 3, int64_t stride = 1) {
    onnx::NodeProto *conv = g.node(
        "Conv", "conv_" + tag,
        {x, g.init("w_" + tag, {out, in / group, kernel, kernel}, 0.1f)});
    int64_t pad = kernel / 2;
    GraphBuilder::attr(conv, "pads", {pad, pad, pad, pad});
    if (group > 1)
      GraphBuilder::attr(conv, "group", {group}, /*list=*/false);
    if (stride > 1)
      GraphBuilder::attr(conv, "strides", {stride, stride});
    GraphBuilder::attr(conv, "kernel_shape", {kernel, kernel});
    onnx::NodeProto *bn = g.node(
        "BatchNormalization", "bn_" + tag,
        {"conv_" + tag, g.init("s_" + tag, {out}, 0, 1.0f),
         g.init("b_" + tag, {out}, 0, 0.0f), g.init("m_" + tag, {out}, 0, 0.0f),
         g.init("v_" + tag, {out}, 0, 1.0f)});
    GraphBuilder::attr(bn, "training_mode", {1}, /*list=*/false);
    g.node("Relu", "relu_" + tag, {"bn_" + tag});
    x = "relu_" + tag;
  };
  block("a", channels, c);
  block("b", c, c);
  g.node("Dropout", "drop",
         {x, g.init("drop_ratio", {}, 0, 0.1f), g.flag("drop_training", true)});
  // Three poolings of the maps, halving them, summed: 2x2 max pooling (a
  // small CNN's), 3x3 max pooling padded (ResNet's: 2.25 taps an input
  // where 2x2 has one) and 2x2 average pooling (nn.AvgPool2d(2)'s), so
  // that the pooling families' fits tell taps from bytes.
  onnx::NodeProto *pool = g.node("MaxPool", "pool", {"drop"});
  GraphBuilder::attr(pool, "kernel_shape", {2, 2});
  GraphBuilder::attr(pool, "strides", {2, 2});
  onnx::NodeProto *wide = g.node("MaxPool", "pool_3x3", {"drop"});
  GraphBuilder::attr(wide, "kernel_shape", {3, 3});
  GraphBuilder::attr(wide, "strides", {2, 2});
  GraphBuilder::attr(wide, "pads", {1, 1, 1, 1});
  onnx::NodeProto *halving = g.node("AveragePool", "pool_average", {"drop"});
  GraphBuilder::attr(halving, "kernel_shape", {2, 2});
  GraphBuilder::attr(halving, "strides", {2, 2});
  g.node("Add", "pools", {"pool", "pool_3x3"});
  g.node("Add", "pooled", {"pools", "pool_average"});
  x = "pooled";
  // Down to 8 channels and back (the family "shallow_conv": fewer than 16
  // channels in or out, a small CNN's).
  block("s", c, 8);
  block("t", 8, 8);
  block("u", 8, c);
  block("c", c, 2 * c);
  block("d", 2 * c, 2 * c, 2 * c);
  block("e", 2 * c, 2 * c, 1, /*kernel=*/1);
  // An average pooling (the family "pooling", forward and backward, which
  // the global one's gradient, a generated loop, does not time): 2x2
  // windows at stride 1 and padded after, so that the maps keep their size
  // for the blocks after it (four taps an input).
  onnx::NodeProto *average = g.node("AveragePool", "average", {x});
  GraphBuilder::attr(average, "kernel_shape", {2, 2});
  GraphBuilder::attr(average, "pads", {0, 0, 1, 1});
  x = "average";
  block("f", 2 * c, 2 * c, 2 * c, 3, /*stride=*/2);
  // A 3x3 on the maps the strided one left: on the smallest images' 1x1
  // and 2x2 maps the kernel of maps smaller than their kernel.
  block("g", 2 * c, 2 * c);
  g.node("GlobalAveragePool", "gap", {x});
  g.node("Flatten", "flatten", {"gap"});
  onnx::NodeProto *fc = g.node("Gemm", "fc",
                               {"flatten", g.init("w_fc", {10, 2 * c}, 0.1f),
                                g.init("b_fc", {10}, 0, 0.0f)});
  GraphBuilder::attr(fc, "transB", {1}, /*list=*/false);
  g.output("fc");
}

/// A classifier of 10 classes over a [B, ...] sequence of `features`
/// elements a sample, flattened: the graph's output.
void sequenceClassifier(GraphBuilder &g, const std::string &x, int64_t b,
                        int64_t features) {
  g.node("Reshape", "flat", {x, g.ints("shape", {b, features})});
  onnx::NodeProto *fc = g.node("Gemm", "fc",
                               {"flat", g.init("w_fc", {10, features}, 0.05f),
                                g.init("b_fc", {10}, 0, 0.0f)});
  GraphBuilder::attr(fc, "transB", {1}, /*list=*/false);
  g.output("fc");
}

/// [B, T, D]: LayerNorm, an MLP of width 4D (MatMul, ReLU, Dropout, MatMul), a
/// residual Add, a transpose there and back, Softmax over D, and a
/// classifier of the flattened sequence, or with `vocab` a language model's
/// head: logits of each token over `vocab` classes, attention
/// (softmax(x x^T) x, fused, and again with dropout on the weights, then
/// relu(x x^T) x: two products of stacks of matrices) before the MLP and its
/// activation GELU as torch.onnx writes it (x * (1 + erf(x / sqrt 2)) * 0.5:
/// one nn.gelu, the cost model's family "gelu").
void sequenceNet(GraphBuilder &g, int64_t b, int64_t t, int64_t d,
                 int64_t vocab) {
  g.input("x", {b, t, d});
  g.node("LayerNormalization", "ln",
         {"x", g.init("ln_s", {d}, 0, 1.0f), g.init("ln_b", {d}, 0, 0.0f)});
  std::string mlpInput = "ln";
  if (vocab > 0) {
    // Attention (one head, the normalized sequence as queries, keys and
    // values), fused into one kernel (the family "attention"), then again
    // with dropout on the weights ("attention_dropout"), then two products
    // of stacks of matrices with no softmax between ("batched_matmul").
    GraphBuilder::attr(g.node("Transpose", "keys", {"ln"}), "perm", {0, 2, 1});
    g.node("MatMul", "scores", {"ln", "keys"});
    GraphBuilder::attr(g.node("Softmax", "weights", {"scores"}), "axis", {-1},
                       /*list=*/false);
    g.node("MatMul", "context", {"weights", "ln"});
    g.node("Add", "attended", {"ln", "context"});
    GraphBuilder::attr(g.node("Transpose", "keys2", {"attended"}), "perm",
                       {0, 2, 1});
    g.node("MatMul", "scores2", {"attended", "keys2"});
    GraphBuilder::attr(g.node("Softmax", "weights2", {"scores2"}), "axis", {-1},
                       /*list=*/false);
    g.node("Dropout", "weights2_drop",
           {"weights2", g.init("weights2_ratio", {}, 0, 0.1f),
            g.flag("weights2_training", true)});
    g.node("MatMul", "context2", {"weights2_drop", "attended"});
    g.node("Add", "attended2", {"attended", "context2"});
    GraphBuilder::attr(g.node("Transpose", "keys3", {"attended2"}), "perm",
                       {0, 2, 1});
    g.node("MatMul", "scores3", {"attended2", "keys3"});
    g.node("Relu", "weights3", {"scores3"});
    g.node("MatMul", "context3", {"weights3", "attended2"});
    g.node("Add", "attended3", {"attended2", "context3"});
    mlpInput = "attended3";
  }
  g.node("MatMul", "up", {mlpInput, g.init("w_up", {d, 4 * d}, 0.05f)});
  if (vocab > 0) {
    g.node("Div", "gelu_div", {"up", g.scalar("sqrt2", std::sqrt(2.0f))});
    g.node("Erf", "gelu_erf", {"gelu_div"});
    g.node("Add", "gelu_add", {"gelu_erf", g.scalar("one", 1.0f)});
    g.node("Mul", "gelu_mul", {"up", "gelu_add"});
    g.node("Mul", "act", {"gelu_mul", g.scalar("half", 0.5f)});
  } else {
    g.node("Relu", "act", {"up"});
  }
  g.node("Dropout", "drop",
         {"act", g.init("drop_ratio", {}, 0, 0.1f),
          g.flag("drop_training", true)});
  g.node("MatMul", "down", {"drop", g.init("w_down", {4 * d, d}, 0.05f)});
  g.node("Add", "residual", {"down", "x"});
  GraphBuilder::attr(g.node("Transpose", "swap", {"residual"}), "perm",
                     {0, 2, 1});
  GraphBuilder::attr(g.node("Transpose", "back", {"swap"}), "perm", {0, 2, 1});
  GraphBuilder::attr(g.node("Softmax", "softmax", {"back"}), "axis", {-1},
                     /*list=*/false);
  if (vocab > 0) {
    g.node("MatMul", "head", {"softmax", g.init("w_head", {d, vocab}, 0.05f)});
    g.output("head");
    return;
  }
  sequenceClassifier(g, "softmax", b, t * d);
}

/// [B, T, D]: LayerNorm and multi-head self-attention of `heads` heads as
/// exporters write nn.MultiheadAttention's and a GPT's (projections, the
/// reshapes and transposes to [B, heads, T, D / heads], the scores' product,
/// the scale, Softmax, Dropout, the context's product, the transpose and
/// reshape back, the output projection, a residual Add), then a classifier
/// of the flattened sequence. Its sequences are shorter than attention's
/// fusion wants (gpipe-fuse-attention's min-keys): the products of many
/// small matrices ("batched_matmul"), softmax over short rows and the
/// copies of heads that a small Transformer runs.
void headsNet(GraphBuilder &g, int64_t b, int64_t t, int64_t d, int64_t heads) {
  int64_t dh = d / heads;
  g.input("x", {b, t, d});
  g.node("LayerNormalization", "ln",
         {"x", g.init("ln_s", {d}, 0, 1.0f), g.init("ln_b", {d}, 0, 0.0f)});
  std::string split = g.ints("split", {b, t, heads, dh});
  auto project = [&](const std::string &tag, std::vector<int64_t> perm) {
    g.node("MatMul", tag, {"ln", g.init("w_" + tag, {d, d}, 0.05f)});
    g.node("Reshape", tag + "_heads", {tag, split});
    GraphBuilder::attr(g.node("Transpose", tag + "_t", {tag + "_heads"}),
                       "perm", perm);
    return tag + "_t";
  };
  std::string q = project("q", {0, 2, 1, 3});
  std::string k = project("k", {0, 2, 3, 1});
  std::string v = project("v", {0, 2, 1, 3});
  g.node("MatMul", "scores", {q, k});
  g.node("Div", "scaled",
         {"scores", g.scalar("scale", std::sqrt(static_cast<float>(dh)))});
  GraphBuilder::attr(g.node("Softmax", "weights", {"scaled"}), "axis", {-1},
                     /*list=*/false);
  g.node("Dropout", "weights_drop",
         {"weights", g.init("weights_ratio", {}, 0, 0.1f),
          g.flag("weights_training", true)});
  g.node("MatMul", "context", {"weights_drop", v});
  GraphBuilder::attr(g.node("Transpose", "context_t", {"context"}), "perm",
                     {0, 2, 1, 3});
  g.node("Reshape", "merged", {"context_t", g.ints("merge", {b, t, d})});
  g.node("MatMul", "out", {"merged", g.init("w_out", {d, d}, 0.05f)});
  g.node("Add", "residual", {"out", "x"});
  sequenceClassifier(g, "residual", b, t * d);
}

struct Sample {
  double work, bytes, parameterBytes, planes, forward, backward;
  /// The micro-batches of the step the times are the mean run of.
  int64_t microBatches = 1;
  /// The machine's pace when the times were taken (one core's sgemm,
  /// GFLOP/s).
  double pace = 0;
};

using Coefficients = DeviceProfile::KernelFit::Coefficients;
constexpr int regressors = std::tuple_size_v<Coefficients>;
using Point = std::array<double, regressors + 1>;

/// Least squares to relative error over the regressors `use` names, with
/// the work's coefficient (x1) fixed at `work` when it is given.
std::array<double, regressors> solve(const std::vector<Point> &points,
                                     std::array<bool, regressors> use,
                                     std::optional<double> work) {
  constexpr int n = regressors;
  if (work)
    use[1] = false;
  double m[n][n + 1] = {};
  for (const Point &p : points) {
    double t = p[n], w = 1.0 / std::max(t * t, 1e-18);
    double rest = t - (work ? *work * p[1] : 0.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        m[i][j] += use[i] && use[j] ? w * p[i] * p[j] : 0;
    for (int i = 0; i < n; ++i)
      m[i][n] += use[i] ? w * p[i] * rest : 0;
  }
  for (int i = 0; i < n; ++i)
    if (!use[i])
      m[i][i] = 1;
  // Gaussian elimination with partial pivoting.
  std::array<double, n> c;
  c.fill(-1);
  for (int k = 0; k < n; ++k) {
    int p = k;
    for (int r = k + 1; r < n; ++r)
      if (std::abs(m[r][k]) > std::abs(m[p][k]))
        p = r;
    std::swap(m[k], m[p]);
    if (std::abs(m[k][k]) < 1e-300)
      return c;
    for (int r = 0; r < n; ++r)
      if (r != k) {
        double f = m[r][k] / m[k][k];
        for (int q = k; q <= n; ++q)
          m[r][q] -= f * m[k][q];
      }
  }
  for (int i = 0; i < n; ++i)
    c[i] = m[i][n] / m[i][i];
  if (work)
    c[1] = *work;
  return c;
}

/// Which regressor each is a part of (the bytes beyond the caches of the
/// bytes), -1 for none: a kernel's activations' (4) and parameters' (5)
/// bytes beyond the caches, a generated loop's (2).
using Parts = std::array<int, regressors>;
constexpr Parts kernelParts{-1, -1, -1, -1, 2, 3, -1, -1};
constexpr Parts loopParts{-1, -1, 1, -1, -1, -1, -1, -1};

/// The points whose regressor `part` holds at least a tenth of regressor
/// `whole` (the bytes beyond the caches of the bytes).
int64_t pointsHoldingPart(const std::vector<Point> &points, int part,
                          int whole) {
  return llvm::count_if(points, [&](const Point &p) {
    return p[part] > 0 && p[part] >= 0.1 * p[whole];
  });
}

/// pointsHoldingPart of each part `parts` names, in regressor order (the
/// profile's `beyond_caches_points`).
llvm::json::Array pointsHoldingParts(const std::vector<Point> &points,
                                     const Parts &parts) {
  llvm::json::Array counts;
  for (int i = 0; i < regressors; ++i)
    if (parts[i] >= 0)
      counts.push_back(pointsHoldingPart(points, i, parts[i]));
  return counts;
}

/// The most work per second the family's points reached: the median of
/// its three fastest (of all where there are fewer), so that one kernel
/// timed fast by chance does not set the law. The single fastest set the
/// one-core matmul's work at 174 to 220 GFLOP/s in six calibrations of one
/// machine (one core's sgemm 166-170), and every prediction of a GPT moved
/// with it, by up to 10%.
double fastestRate(const std::vector<Point> &points) {
  std::vector<double> rates;
  for (const Point &p : points)
    if (p[regressors] > 0 && p[1] > 0)
      rates.push_back(p[1] / p[regressors]);
  if (rates.empty())
    return 0;
  size_t top = std::min<size_t>(3, rates.size());
  std::partial_sort(rates.begin(), rates.begin() + top, rates.end(),
                    std::greater<double>());
  return rates[top / 2];
}

/// Seconds t = c0 x0 + ... + c7 x7 over points {x0..x7, t} (the
/// regressors `use` names; x1, the work, always), fitted to relative error
/// (weights 1/t^2) so that small kernels count as much as large ones; no
/// coefficient negative (a negative one is dropped and the rest fitted
/// again), and the work priced at no more than the fastest rate a point of
/// the family reached (work / seconds; for a matmul, about the cores'
/// sgemm peak): left free, the bytes' terms took the large kernels' time
/// and the work came out at twice the peak (a matmul at 550 GFLOP/s on a
/// core of 270), which underpriced every large product the calibration did
/// not hold. Kernels: x = (1, work, bytes of activations, bytes of
/// parameters, of each beyond the cores' level 2 caches, the result's
/// planes (only for kernels over feature maps or stacks of matrices: a
/// matmul's rows are not maps; attention's unfused products of 16 x 16
/// matrices ran at 15 GFLOP/s, about 0.5 us a matrix, where a fit of
/// FLOPs and bytes alone had priced them at twice that rate), and the bytes of
/// parameters over the step's micro-batches), the parameters' bytes and the
/// activations' in the cache only for families timed by FLOPs (a small matmul
/// or convolution reads its weights whatever its rows; a weight gradient writes
/// them too), the last only for kernels that convert their weights once a step
/// (timed as a mean run, one run of M converted them). `partOf` names, for a
/// regressor that is a part of another (the bytes beyond the caches of the
/// bytes), that other one; -1 for the rest.
Coefficients fit(const std::vector<Point> &points,
                 std::array<bool, regressors> use, const Parts &partOf) {
  constexpr int n = regressors;
  double fastest = fastestRate(points);
  std::optional<double> work;
  use[1] = true;
  // A regressor zero at every point (no parameters beyond the caches) has
  // nothing to fit: left out, not left to make the system singular.
  for (int i = 0; i < n; ++i)
    use[i] = use[i] &&
             llvm::any_of(points, [&](const auto &p) { return p[i] != 0; });
  // A part is fitted only where at least three points hold a tenth of the
  // whole in it: a slope fitted from bytes beyond the caches that are a
  // fraction f of a point's bytes multiplies that point's noise (a few
  // percent) by 1/f. Two cores' batch norms of 4.19 MB against a cache of
  // 4 MiB (128 bytes beyond) priced the bytes beyond it at 0.02 GB/s, and
  // a MobileNet step on both cores at 19x its time.
  for (int i = 0; i < n; ++i)
    if (use[i] && partOf[i] >= 0)
      use[i] = pointsHoldingPart(points, i, partOf[i]) >= 3;
  for (int round = 0; round < 2 * n; ++round) {
    std::array<double, n> c = solve(points, use, work);
    bool negative = false;
    for (int i = 0; i < n; ++i)
      if (use[i] && c[i] < 0 && i != 1) {
        use[i] = false;
        negative = true;
      }
    if (negative)
      continue;
    if (!work && fastest > 0 && c[1] < 1.0 / fastest) {
      // Faster than any point ran (or free): the work at the fastest
      // rate seen, the rest fitted to what is left.
      work = 1.0 / fastest;
      continue;
    }
    for (int i = 0; i < n; ++i)
      c[i] = use[i] || i == 1 ? c[i] : 0;
    return c;
  }
  std::array<bool, n> workAlone{};
  workAlone[1] = true;
  std::array<double, n> c = solve(points, workAlone, std::nullopt);
  Coefficients out{};
  out[1] = std::max(c[1], 0.0);
  return out;
}

/// A random batch for `session`: normal floats, labels below its classes.
std::map<std::string, runtime::HostTensor>
randomBatch(const runtime::TrainingSession &session, std::mt19937 &rng) {
  std::map<std::string, runtime::HostTensor> batch;
  for (const runtime::TensorSlot *slot : session.dataInputs()) {
    runtime::HostTensor t;
    t.dtype = slot->dtype;
    t.shape = slot->shape;
    t.shape[0] = session.batchSize();
    t.data.resize(t.numElements() * runtime::dtypeSize(t.dtype));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < t.numElements(); ++i) {
      if (t.dtype == runtime::DType::F32)
        reinterpret_cast<float *>(t.data.data())[i] = normal(rng);
      else if (t.dtype == runtime::DType::I64)
        reinterpret_cast<int64_t *>(t.data.data())[i] = static_cast<int64_t>(
            rng() % std::max<int64_t>(session.classCount(), 1));
    }
    batch[slot->name] = std::move(t);
  }
  return batch;
}

} // namespace

llvm::Expected<llvm::json::Array>
gpipe::calibrateKernels(mlir::DialectRegistry &registry, double privateCacheMiB,
                        llvm::raw_ostream &log, bool timeBf16,
                        std::array<double, 3> *paceRange) {
  auto failure = [](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), why);
  };
  // One core, and every core of this process when they are consecutive.
  std::vector<int> cores = affinityCores();
  if (cores.empty())
    return failure("no core to run on");
  std::vector<std::pair<int64_t, std::string>> deviceSets{
      {1, "cpu:" + std::to_string(cores.front())}};
  if (cores.size() > 1 &&
      cores.back() - cores.front() + 1 == static_cast<int>(cores.size()))
    deviceSets.push_back({static_cast<int64_t>(cores.size()),
                          "cpu:" + std::to_string(cores.front()) + "-" +
                              std::to_string(cores.back())});
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("gpipe-calibrate", dir))
    return failure("cannot make a temporary directory: " + ec.message());
  struct Cleanup {
    llvm::SmallString<128> dir;
    ~Cleanup() { llvm::sys::fs::remove_directories(dir); }
  } cleanup{dir};

  // The models: (kind, batch, size, size[, a sequence's vocabulary or
  // heads]).
  enum Kind { Conv, Sequence, Heads };
  struct Spec {
    Kind kind;
    int64_t b, m, n, vocab = 0;
  };
  const Spec specs[] = {{Conv, 4, 16, 32},
                        {Conv, 32, 16, 32},
                        {Conv, 8, 32, 16},
                        {Conv, 32, 64, 16},
                        {Conv, 8, 128, 8},
                        {Conv, 32, 128, 8},
                        {Conv, 4, 256, 4},
                        {Conv, 32, 256, 4},
                        // A small language model's kernels: 64 tokens
                        // of width 32 (its products take microseconds).
                        {Sequence, 8, 64, 32, 512},
                        {Sequence, 4, 16, 64},
                        {Sequence, 16, 32, 64, 512},
                        {Sequence, 8, 64, 128},
                        {Sequence, 32, 64, 128, 1024},
                        {Sequence, 8, 32, 256, 4096},
                        {Sequence, 8, 16, 512},
                        {Sequence, 4, 8, 1024},
                        {Conv, 32, 512, 2},
                        // Feature maps past a core's own caches (4 MiB
                        // a tensor at 32 channels on 32x32 maps): an
                        // image model's first blocks on a whole batch,
                        // MobileNet's depthwise convolutions and batch
                        // norms at 32 images (their gradients took
                        // 2-3x their price fitted on maps in the cache).
                        {Conv, 32, 32, 32},
                        // Few channels on MNIST's maps: a small CNN's first
                        // layers (1 or 3 channels into 8).
                        {Conv, 8, 8, 28},
                        {Conv, 32, 8, 28},
                        // Heads of 16 to 32 on short sequences: a small
                        // Transformer's unfused attention (heads as
                        // the last figure).
                        {Heads, 32, 16, 64, 4},
                        {Heads, 8, 32, 128, 8},
                        {Heads, 8, 64, 128, 4},
                        {Heads, 4, 64, 256, 8},
                        // Heads of 8: the weights times v has 8 columns
                        // (narrow_batched_matmul), a small GPT's.
                        {Heads, 8, 64, 32, 4},
                        {Heads, 16, 32, 64, 8},
                        {Heads, 16, 48, 32, 4}};
  // family -> cores -> samples
  std::map<std::string, std::map<int64_t, std::vector<Sample>>> samples;
  // family ("elementwise", "copy", "gelu") -> cores -> the generated loops:
  // bytes moved, seconds; the forwards' [0] and the backwards' [1] (a gradient
  // loop's bytes, CostOpInterface::getBackwardBytesMoved, are a rule of
  // thumb: its speed per byte is its own).
  // (bytes, seconds, the machine's pace then)
  using LoopSamples = std::vector<std::array<double, 3>>;
  std::map<std::string, std::map<int64_t, std::array<LoopSamples, 2>>> loops;
  std::vector<double> paces;
  std::mt19937 rng(7);
  mlir::MLIRContext context(registry);
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &) {
    return mlir::success(); // reported by compileModel's own handler
  });
  // Each model in float32, and where this CPU multiplies in bfloat16 the
  // models with products (not the heads' attention) again in bfloat16:
  // the samples of the "_bf16" families (the rest of such a bundle runs
  // the float32 kernels, timed in the float32 runs).
  std::vector<std::string> precisions{"fp32"};
  if (timeBf16 && runtime::cpuMultipliesBf16())
    precisions.push_back("bf16");
  for (auto [i, spec] : llvm::enumerate(specs)) {
    // One model, the same weights in both precisions.
    GraphBuilder g(rng);
    if (spec.kind == Conv)
      convNet(g, spec.b, spec.m, spec.n, i % 2 ? 3 : 1);
    else if (spec.kind == Sequence)
      sequenceNet(g, spec.b, spec.m, spec.n, spec.vocab);
    else
      headsNet(g, spec.b, spec.m, spec.n, spec.vocab);
    std::string onnxPath = (dir + "/model" + llvm::Twine(i) + ".onnx").str();
    if (!g.write(onnxPath))
      return failure("cannot write " + onnxPath);
    for (const std::string &precision : precisions) {
      bool bf16 = precision == "bf16";
      if (bf16 && spec.kind == Heads)
        continue;
      ONNXImportOptions import;
      mlir::OwningOpRef<mlir::ModuleOp> module =
          importONNXFile(onnxPath, &context, import);
      if (!module)
        return failure("cannot import the calibration model " + onnxPath);
      // Attention fused at any length in the sequence models (the
      // calibration's sequences are short; the attention families' fits are
      // for the long ones), as models of short sequences run it (unfused) in
      // the models of heads. The same in the table of the ops as the
      // compiler prices them and in the bundle timed.
      FuseAttentionOptions attention;
      if (spec.kind == Sequence)
        attention.minKeys = 1;
      {
        mlir::PassManager pm(&context);
        SetPrecisionOptions setPrecision;
        setPrecision.precision = precision;
        pm.addPass(createSetPrecision(setPrecision));
        buildTrainingModelPipeline(pm, AppendLossOptions{}, attention);
        if (mlir::failed(pm.run(*module)))
          return failure("cannot append the loss to " + onnxPath);
      }
      LayerTable table = LayerTable::build(
          module->lookupSymbol<mlir::func::FuncOp>("forward"), 0, nullptr);
      double trainableBytes = 0;
      for (int64_t l = 0; l < table.size(); ++l)
        trainableBytes += table.trainableBytes[l];
      // Per micro-batch of `rows` rows: each op's family and work, bytes and
      // parameters' bytes, by its node name; the generated loops' forward
      // and backward bytes, by the op they are timed as (a fused chain's by
      // its last op, whose bytes the layer table counts the chain's).
      struct LoopBytes {
        double forward = 0, backward = 0;
        std::string family;
      };
      struct Figures {
        std::map<std::string, std::pair<std::string, double>> work;
        std::map<std::string, LoopBytes> elementwise;
        std::map<std::string, double> bytesOf, parameterBytesOf, planesOf;
        std::set<std::string> partialBackward;
      };
      auto figuresAt = [&](int64_t rows) {
        Figures f;
        for (int64_t l = 0; l < table.size(); ++l) {
          std::string key = costTableKey(table.layers[l]);
          if (key.empty())
            continue;
          if (isGeneratedLoop(table.family[l])) {
            // (An alias, such as the loss's reshapes, runs no loop.)
            if (table.bytesMoved[l] > 0) {
              LoopBytes &loop = f.elementwise[key];
              loop.forward += table.bytes(l, rows);
              loop.backward += table.backwardBytes(l, rows);
              loop.family = table.family[l];
            }
            continue;
          }
          f.work[key] = {table.family[l], table.work(l, rows)};
          f.bytesOf[key] = table.bytes(l, rows);
          f.parameterBytesOf[key] = table.constantBytes[l];
          f.planesOf[key] = table.planesAt(l, rows);
          // A first layer computes no input gradient: its backward is not
          // the family's.
          if (table.backwardShare[l] != 1)
            f.partialBackward.insert(key);
        }
        return f;
      };
      // Each model as one stage on the whole batch and on micro-batches of
      // a quarter of it: a kernel run once a step and one run again and
      // again on few rows (in caches its previous run filled), as a plan of
      // many micro-batches runs it.
      for (int64_t micro : {int64_t(1), int64_t(4)}) {
        if (spec.b % micro)
          continue;
        auto [work, elementwise, bytesOf, parameterBytesOf, planesOf,
              partialBackward] = figuresAt(spec.b / micro);
        for (auto [cores, devices] : deviceSets) {
          CompileOptions o;
          o.input = onnxPath;
          o.output =
              (dir + "/model" + llvm::Twine(i) + "_" + llvm::Twine(cores) +
               "_" + llvm::Twine(micro) + "_" + precision + ".gpipe")
                  .str();
          o.precision = precision;
          o.train = true;
          o.batchSize = spec.b;
          o.training.microBatches = micro;
          o.devices = devices;
          o.training.optimizer = "sgd";
          o.attentionMinKeys = attention.minKeys; // as the table's
          o.quiet = true;
          if (compileModel(o, registry) != 0)
            return failure("cannot compile the calibration model " + onnxPath);
          // In this process whatever launched it (mpirun included).
          runtime::TrainingSession session(o.output, /*allStagesHere=*/true);
          auto batch = randomBatch(session, rng);
          for (int s = 0; s < 3; ++s)
            session.step(batch);
          // The machine's pace right before the timed steps (and right after
          // them, below).
          double paceBefore = runtime::cpuSgemmGflops();
          // Each step timed on its own and the median step of each figure
          // kept: one step slowed by the machine (a preemption is hundreds of
          // microseconds, a small kernel's whole time) moves a mean of a few
          // steps, and with it the fits' fixed costs (a 1-core convolution's
          // measured 4, 8 and 22 us in three calibrations with means of 5).
          const int steps = 9;
          std::vector<double> optimizerSteps;
          std::map<std::string,
                   std::pair<std::vector<double>, std::vector<double>>>
              opSteps;
          for (int s = 0; s < steps; ++s) {
            session.enableOpProfile();
            runtime::TrainingSession::Stats before = session.stats();
            session.step(batch);
            runtime::TrainingSession::Stats after = session.stats();
            optimizerSteps.push_back(after.stages[0].optimizerSeconds -
                                     before.stages[0].optimizerSeconds);
            for (const auto &[name, seconds] : session.opProfile()) {
              opSteps[name].first.push_back(seconds.first);
              opSteps[name].second.push_back(seconds.second);
            }
          }
          // The faster of the probes around the steps: a probe slowed by a
          // moment's preemption (one read 126 GFLOP/s between probes of 170
          // around it) scaled a whole model's kernels by 0.75, and they set
          // their families' fastest rates; a machine slow for the whole
          // steps reads slow in both.
          double pace = std::max(paceBefore, runtime::cpuSgemmGflops());
          paces.push_back(pace);
          // The library kernels and the generated loops one by one.
          double optimizer = median(optimizerSteps);
          if (optimizer > 0 && micro == 1 && !bf16)
            samples["optimizer"][cores].push_back({/*work=*/trainableBytes,
                                                   /*bytes=*/trainableBytes,
                                                   /*parameterBytes=*/0,
                                                   /*planes=*/0,
                                                   /*forward=*/optimizer,
                                                   /*backward=*/0,
                                                   /*microBatches=*/1, pace});
          for (auto &[name, times] : opSteps) {
            double forward = median(times.first),
                   backward = median(times.second);
            if (auto loop = elementwise.find(name); loop != elementwise.end()) {
              if (bf16)
                continue;
              const LoopBytes &bytes = loop->second;
              auto &into = loops[bytes.family][cores];
              if (bytes.forward > 0 && forward > 0)
                into[0].push_back({bytes.forward, forward, pace});
              if (bytes.backward > 0 && backward > 0)
                into[1].push_back({bytes.backward, backward, pace});
              continue;
            }
            auto it = work.find(name);
            if (it == work.end() || it->second.second <= 0 ||
                bf16 != llvm::StringRef(it->second.first).ends_with("_bf16"))
              continue;
            samples[it->second.first][cores].push_back(
                {it->second.second, bytesOf[name], parameterBytesOf[name],
                 planesOf[name], forward,
                 partialBackward.count(name) ? 0 : backward, micro, pace});
          }
        }
      }
      log << llvm::format("calibrate: kernels of model %zu of %zu timed (%s)\r",
                          i + 1, std::size(specs), precision.c_str());
    }
  }
  log << "\n";
  if (const char *dump = std::getenv("GPIPE_CALIBRATION_SAMPLES")) {
    std::ofstream out(dump);
    out << "family,cores,work,bytes,parameter_bytes,planes,forward,backward,"
           "micro_batches,pace\n";
    for (const auto &[family, byCores] : samples)
      for (const auto &[cores, points] : byCores)
        for (const Sample &p : points)
          out << family << ',' << cores << ',' << p.work << ',' << p.bytes
              << ',' << p.parameterBytes << ',' << p.planes << ',' << p.forward
              << ',' << p.backward << ',' << p.microBatches << ',' << p.pace
              << '\n';
    // The generated loops: their bytes as work and bytes, a forward's
    // seconds or a backward's.
    for (const auto &[family, byCores] : loops)
      for (const auto &[cores, phases] : byCores)
        for (int phase = 0; phase < 2; ++phase)
          for (const auto &[bytes, seconds, pace] : phases[phase])
            out << family << ',' << cores << ',' << bytes << ',' << bytes
                << ",0,0," << (phase ? 0 : seconds) << ','
                << (phase ? seconds : 0) << ",1," << pace << '\n';
  }
  // Times taken at another pace than the median one, scaled to it: this
  // machine's pace can move by tens of percent within a minute (a shared
  // host), and kernels timed in a slow spell and others in a fast one would
  // be fitted as one law that holds at neither pace.
  if (paces.empty())
    return failure("no calibration model was timed");
  double medianPace = median(paces);
  auto atMedianPace = [&](double seconds, double pace) {
    return pace > 0 && medianPace > 0 ? seconds * pace / medianPace : seconds;
  };
  auto [slowest, fastest] = std::minmax_element(paces.begin(), paces.end());
  log << llvm::format("calibrate: the machine's pace over the kernels' timing "
                      "(one core's sgemm around each of %zu runs, the "
                      "faster): %.1f to %.1f GFLOP/s, median %.1f; times "
                      "scaled to the median\n",
                      paces.size(), *slowest, *fastest, medianPace);
  if (paceRange)
    *paceRange = {*slowest, medianPace, *fastest};
  llvm::json::Array fits;
  for (const auto &[family, byCores] : samples)
    for (const auto &[cores, points] : byCores) {
      // As DeviceProfile::kernelSeconds reads them.
      double cache = privateCacheMiB * double(1 << 20) * double(cores);
      std::vector<Point> fwd, bwd;
      for (const Sample &p : points) {
        std::array<double, 7> x =
            kernelFeatures(p.work, p.bytes, p.parameterBytes, p.planes, cache);
        double converted = std::min(p.parameterBytes, p.bytes) /
                           static_cast<double>(p.microBatches);
        if (p.forward > 0)
          fwd.push_back({x[0], x[1], x[2], x[3], x[4], x[5], x[6], converted,
                         atMedianPace(p.forward, p.pace)});
        if (p.backward > 0)
          bwd.push_back({x[0], x[1], x[2], x[3], x[4], x[5], x[6], converted,
                         atMedianPace(p.backward, p.pace)});
      }
      if (fwd.size() < 3)
        continue;
      bool flops = timedByFlops(family), counted = workIsOpFlops(family);
      std::string unit(workUnit(findKernelFamily(family)->timing));
      std::array<bool, regressors> use{true,
                                       true,
                                       counted,
                                       flops,
                                       cache > 0,
                                       flops && cache > 0,
                                       pricesPlanes(family),
                                       convertsParameters(family)};
      Coefficients f = fit(fwd, use, kernelParts);
      auto json = [](const Coefficients &c) {
        llvm::json::Array a;
        for (double v : c)
          a.push_back(v);
        return a;
      };
      llvm::json::Object entry{
          {"family", family},
          {"cores", cores},
          {"work", unit},
          {"samples", static_cast<int64_t>(fwd.size())},
          {"forward", json(f)},
          {"fastest_forward", fastestRate(fwd)},
          {"beyond_caches_points", pointsHoldingParts(fwd, kernelParts)}};
      if (bwd.size() >= 3) {
        entry["backward"] = json(fit(bwd, use, kernelParts));
        entry["fastest_backward"] = fastestRate(bwd);
      }
      std::string bytesRates;
      if (f[2] > 0)
        bytesRates += llvm::formatv(" + bytes at {0:f2} GB/s", 1e-9 / f[2]);
      if (f[3] > 0)
        bytesRates +=
            llvm::formatv(" + parameters' at {0:f2} GB/s", 1e-9 / f[3]);
      for (int k : {4, 5})
        if (f[k] > 0)
          bytesRates += llvm::formatv(" + {0} beyond {1} MiB at {2:f2} GB/s",
                                      k == 4 ? "activations" : "parameters",
                                      cache / (1 << 20), 1e-9 / f[k]);
      if (f[6] > 0)
        bytesRates += llvm::formatv(" + {0:f2} ns a plane", f[6] * 1e9);
      if (f[7] > 0)
        bytesRates += llvm::formatv(
            "; once a step, parameters converted at {0:f2} GB/s", 1e-9 / f[7]);
      log << llvm::format("calibrate: %-13s on %lld core(s): forward %.1f "
                          "us + %s at %.2f %s%s (%zu kernels)\n",
                          family.c_str(), static_cast<long long>(cores),
                          f[0] * 1e6, flops ? "FLOPs" : unit.c_str(),
                          1e-9 / f[1],
                          flops     ? "GFLOP/s"
                          : counted ? "Gtaps/s"
                                    : "GB/s",
                          bytesRates.c_str(), fwd.size());
      fits.push_back(std::move(entry));
    }
  // The generated loops, forwards and backwards apart: a + b x bytes + c x
  // the bytes beyond the cores' own caches (DeviceProfile::loopSeconds),
  // fitted to relative error; each family on its own (a transpose's
  // strided reads are slower than an addition's), a family without loops
  // in these models as "elementwise".
  for (const auto &[family, byCores] : loops)
    for (const auto &[cores, samples] : byCores) {
      double cache = privateCacheMiB * double(1 << 20) * double(cores);
      std::array<std::optional<Coefficients>, 2> c;
      llvm::json::Array beyondPoints;
      for (int phase = 0; phase < 2; ++phase) {
        if (samples[phase].size() < 3)
          continue;
        std::vector<Point> points;
        for (const auto &[bytes, seconds, pace] : samples[phase])
          points.push_back({1, bytes,
                            cache > 0 ? std::max(0.0, bytes - cache) : 0, 0, 0,
                            0, 0, 0, atMedianPace(seconds, pace)});
        c[phase] = fit(points, {true, true, cache > 0}, loopParts);
        if (phase == 0)
          beyondPoints = pointsHoldingParts(points, loopParts);
      }
      if (!c[0])
        continue;
      auto json = [](const Coefficients &f) {
        return llvm::json::Array{f[0], f[1], f[2], 0.0, 0.0, 0.0};
      };
      llvm::json::Object entry{
          {"family", family},
          {"cores", cores},
          {"work", std::string(workUnit(KernelTiming::Loop))},
          {"samples", static_cast<int64_t>(samples[0].size())},
          {"forward", json(*c[0])},
          {"beyond_caches_points", std::move(beyondPoints)}};
      if (c[1])
        entry["backward"] = json(*c[1]);
      fits.push_back(std::move(entry));
      auto describe = [&](const Coefficients &f) {
        std::string beyond = f[2] > 0
                                 ? std::string(llvm::formatv(
                                       ", beyond {0} MiB at {1:f2} GB/s",
                                       cache / (1 << 20), 1e-9 / (f[1] + f[2])))
                                 : std::string();
        return std::string(llvm::formatv("{0:f1} us + bytes at {1:f2} GB/s{2}",
                                         f[0] * 1e6, 1e-9 / f[1], beyond));
      };
      log << llvm::format("calibrate: %-13s on %lld core(s): forward %s; "
                          "backward %s (%zu and %zu loops)\n",
                          family.c_str(), static_cast<long long>(cores),
                          describe(*c[0]).c_str(),
                          c[1] ? describe(*c[1]).c_str() : "as forward",
                          samples[0].size(), samples[1].size());
    }
  return fits;
}
