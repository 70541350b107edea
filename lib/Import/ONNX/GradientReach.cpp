//===- GradientReach.cpp - Initializers no gradient reaches ---------------===//
#include "GradientReach.h"

#include "ConstTensor.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"

#include <cmath>
#include <cstring>

using namespace gpipe::onnx_import;

namespace {

/// How many leading inputs of `op` pass a gradient back: all (-1), none
/// (0), or the data inputs ahead of shapes, axes, indices and statistics.
int differentiableInputs(const onnx::NodeProto &node) {
  const std::string &op = node.op_type();
  if (op == "Cast") {
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == "to")
        return isFloatDType(static_cast<DType>(a.i())) ? -1 : 0;
    return 0;
  }
  return llvm::StringSwitch<int>(op)
      // Integer or boolean results, or derivatives that are zero.
      .Cases("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", 0)
      .Cases("And", "Or", "Not", "Xor", "Shape", "Size", "NonZero", 0)
      .Cases("ArgMax", "ArgMin", "IsNaN", "IsInf", "ConstantOfShape", 0)
      .Cases("Range", "EyeLike", "Sign", "Floor", "Ceil", "Round", 0)
      .Cases("RandomNormalLike", "RandomUniformLike", "Bernoulli", 0)
      // Data first, then shapes, axes, indices, bounds or flags.
      .Cases("Reshape", "Expand", "Tile", "Slice", "Split", "Squeeze", 1)
      .Cases("Unsqueeze", "Pad", "Resize", "TopK", "CumSum", "Trilu", 1)
      .Cases("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", 1)
      .Cases("ReduceProd", "ReduceL2", "ReduceLogSumExp", "Dropout", 1)
      .Cases("Clip", "Gather", "GatherElements", "GatherND", 1)
      .Cases("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", 1)
      // BatchNormalization's running statistics: its importer says why
      // they are not trained.
      .Default(-1);
}

bool passesGradient(const onnx::NodeProto &node, int input) {
  if (node.op_type() == "Where")
    return input != 0; // the condition
  if (node.op_type() == "ScatterND" || node.op_type() == "ScatterElements")
    return input != 1; // the indices
  int n = differentiableInputs(node);
  return n < 0 || input < n;
}

/// Whether a floating-point initializer holds an infinity or a NaN (read
/// in place: no copy of a large weight). float16 and bfloat16 are their
/// bits (an exponent of all ones).
bool hasNonFinite(const onnx::TensorProto &t) {
  const std::string &raw = t.raw_data();
  auto scan = [&](auto tag, auto finite) {
    using T = decltype(tag);
    for (size_t i = 0; i + sizeof(T) <= raw.size(); i += sizeof(T)) {
      T v;
      std::memcpy(&v, raw.data() + i, sizeof(T));
      if (!finite(v))
        return true;
    }
    return false;
  };
  auto isFinite = [](auto v) { return std::isfinite(v); };
  switch (static_cast<DType>(t.data_type())) {
  case DType::Float:
    return scan(float(), isFinite) || llvm::any_of(t.float_data(), [](float v) {
             return !std::isfinite(v);
           });
  case DType::Double:
    return scan(double(), isFinite) ||
           llvm::any_of(t.double_data(),
                        [](double v) { return !std::isfinite(v); });
  case DType::Float16:
  case DType::BFloat16: {
    uint16_t exponent =
        static_cast<DType>(t.data_type()) == DType::Float16 ? 0x7C00 : 0x7F80;
    auto finite16 = [exponent](uint16_t bits) {
      return (bits & exponent) != exponent;
    };
    return scan(uint16_t(), finite16) ||
           llvm::any_of(t.int32_data(), [&](int32_t v) {
             return !finite16(static_cast<uint16_t>(v));
           });
  }
  default:
    return false;
  }
}

} // namespace

llvm::StringMap<std::string>
gpipe::onnx_import::initializersWithoutGradient(const onnx::GraphProto &graph) {
  llvm::StringSet<> reached;
  for (const onnx::ValueInfoProto &out : graph.output())
    reached.insert(out.name());
  // Nodes are in topological order: one pass from the last carries the
  // gradient from every output back to everything it reaches.
  for (int n = graph.node_size() - 1; n >= 0; --n) {
    const onnx::NodeProto &node = graph.node(n);
    bool live = llvm::any_of(node.output(), [&](const std::string &o) {
      return !o.empty() && reached.contains(o);
    });
    if (!live)
      continue;
    for (int i = 0; i < node.input_size(); ++i)
      if (!node.input(i).empty() && passesGradient(node, i))
        reached.insert(node.input(i));
  }
  llvm::StringMap<std::string> users;
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &in : node.input())
      if (!in.empty() && !users.count(in))
        users[in] = node.op_type() + " '" + node.name() + "'";
  llvm::StringMap<std::string> frozen;
  for (const onnx::TensorProto &t : graph.initializer()) {
    if (!isFloatDType(static_cast<DType>(t.data_type())))
      continue;
    // An infinity or a NaN can never be a trained weight (one step would
    // make the loss NaN): an additive mask kept as a buffer, such as
    // triu(full(-inf)), whatever reaches it.
    if (hasNonFinite(t)) {
      frozen[t.name()] = "holds infinities or NaNs: a buffer such as an "
                         "additive mask, never a trained weight";
      continue;
    }
    if (reached.contains(t.name()))
      continue;
    auto user = users.find(t.name());
    frozen[t.name()] =
        user == users.end()
            ? "no node uses it"
            : "no gradient reaches it (" + user->second +
                  " uses it only through comparisons, conditions, indices "
                  "or shapes): a buffer such as a mask, not trained";
  }
  return frozen;
}
