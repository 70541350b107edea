#include "gpipe/runtime/OnnxExport.h"
#include "gpipe/runtime/FileIO.h"

#include "onnx/onnx_pb.h"

#include <climits>
#include <set>
#include <stdexcept>

namespace gpipe::runtime {

namespace {

/// Whether any node or graph output reads `name`.
bool isRead(const onnx::GraphProto &graph, const std::string &name) {
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &input : node.input())
      if (input == name)
        return true;
  for (const onnx::ValueInfoProto &output : graph.output())
    if (output.name() == name)
      return true;
  return false;
}

/// The trained model is for inference (ONNX Runtime, gpipe-opt's default
/// mode): BatchNormalization normalizes with its running statistics
/// (training_mode=0, and the running-statistics outputs that only training
/// mode has are dropped) and Dropout is the identity (its training_mode
/// input dropped: false by default). Outputs something reads are kept.
void toInferenceMode(onnx::GraphProto &graph) {
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    if (node.op_type() == "BatchNormalization" && node.domain().empty()) {
      bool extraOutputsRead = false;
      for (int i = 1; i < node.output_size(); ++i)
        extraOutputsRead |=
            !node.output(i).empty() && isRead(graph, node.output(i));
      if (extraOutputsRead)
        continue;
      for (onnx::AttributeProto &a : *node.mutable_attribute())
        if (a.name() == "training_mode")
          a.set_i(0);
      while (node.output_size() > 1)
        node.mutable_output()->RemoveLast();
    } else if (node.op_type() == "Dropout" && node.domain().empty()) {
      while (node.input_size() > 2)
        node.mutable_input()->RemoveLast();
    }
  }
}

} // namespace

size_t
writeOnnxWithParameters(const std::string &modelPath,
                        const std::map<std::string, HostTensor> &parameters,
                        const std::string &outPath, OnnxGraphMode mode) {
  std::optional<std::string> bytes = readFileBytes(modelPath);
  if (!bytes)
    throw std::runtime_error(modelPath + ": cannot open the model");
  onnx::ModelProto model;
  if (bytes->size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromString(*bytes))
    throw std::runtime_error(modelPath + ": not a readable ONNX model");
  std::set<std::string> replaced;
  for (onnx::TensorProto &init :
       *model.mutable_graph()->mutable_initializer()) {
    auto it = parameters.find(init.name());
    if (it == parameters.end())
      continue;
    const HostTensor &value = it->second;
    int64_t count = 1;
    for (int64_t d : init.dims()) {
      if (d < 0 || d > (int64_t(1) << 40) ||
          (d > 0 && count > (int64_t(1) << 40) / d))
        throw std::runtime_error(modelPath + ": initializer '" + init.name() +
                                 "' has invalid dims");
      count *= d;
    }
    if (count != value.numElements())
      throw std::runtime_error(modelPath + ": initializer '" + init.name() +
                               "' has " + std::to_string(count) +
                               " elements, the trained parameter " +
                               std::to_string(value.numElements()));
    if (init.data_type() != dtypeOnnxType(value.dtype))
      throw std::runtime_error(
          modelPath + ": initializer '" + init.name() +
          "' has ONNX data type " + std::to_string(init.data_type()) +
          ", the trained parameter is " + std::string(dtypeName(value.dtype)));
    // The same tensor (name, dims, type, doc) with the new data as raw_data.
    init.clear_float_data();
    init.clear_int32_data();
    init.clear_string_data();
    init.clear_int64_data();
    init.clear_double_data();
    init.clear_uint64_data();
    init.clear_external_data();
    init.clear_data_location();
    init.set_raw_data(value.data.data(), value.data.size());
    replaced.insert(init.name());
  }
  for (auto &[name, value] : parameters)
    if (!replaced.count(name))
      throw std::runtime_error(modelPath + ": the model has no initializer '" +
                               name + "'");
  if (mode == OnnxGraphMode::Inference)
    toInferenceMode(*model.mutable_graph());
  std::string out;
  if (!model.SerializeToString(&out))
    throw std::runtime_error(outPath + ": cannot serialize the model");
  writeFileAtomically(outPath, out);
  return replaced.size();
}

} // namespace gpipe::runtime
