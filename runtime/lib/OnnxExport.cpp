#include "gpipe/runtime/OnnxExport.h"
#include "gpipe/runtime/FileIO.h"

#include "ProtoWire.h"

#include <set>
#include <stdexcept>

namespace gpipe::runtime {

namespace {

// Field numbers of onnx.proto (ModelProto.graph, GraphProto.initializer,
// TensorProto.name and its data fields).
constexpr unsigned kModelGraph = 7, kGraphInitializer = 5, kTensorName = 8,
                   kTensorRawData = 9;
bool isTensorDataField(unsigned field) {
  // float_data, int32_data, string_data, int64_data, raw_data, double_data,
  // uint64_data, external_data, data_location.
  return field == 4 || field == 5 || field == 6 || field == 7 || field == 9 ||
         field == 10 || field == 11 || field == 13 || field == 14;
}

/// One field: its number and its bytes as they stand (key included).
struct Field {
  unsigned number, wire;
  std::string_view all, payload; // payload: the bytes of a wire-2 field
};

Field next(Reader &r) {
  size_t start = r.position();
  uint64_t key = r.varint();
  Field f{
      static_cast<unsigned>(key >> 3), static_cast<unsigned>(key & 7), {}, {}};
  if (f.wire == 2)
    f.payload = r.take(r.varint());
  else
    r.skip(f.wire);
  f.all = r.slice(start, r.position());
  return f;
}

std::string tensorName(std::string_view tensor, const std::string &where) {
  Reader r(tensor, where);
  while (!r.done()) {
    Field f = next(r);
    if (f.number == kTensorName && f.wire == 2)
      return std::string(f.payload);
  }
  return {};
}

} // namespace

size_t
writeOnnxWithParameters(const std::string &modelPath,
                        const std::map<std::string, HostTensor> &parameters,
                        const std::string &outPath) {
  std::optional<std::string> modelBytes = readFileBytes(modelPath);
  if (!modelBytes)
    throw std::runtime_error(modelPath + ": cannot open the model");
  const std::string &model = *modelBytes;
  std::set<std::string> replaced;
  std::string out;
  Reader r(model, modelPath);
  while (!r.done()) {
    Field f = next(r);
    if (f.number != kModelGraph || f.wire != 2) {
      out.append(f.all);
      continue;
    }
    std::string graph;
    Reader g(f.payload, modelPath);
    while (!g.done()) {
      Field gf = next(g);
      std::string name = gf.number == kGraphInitializer && gf.wire == 2
                             ? tensorName(gf.payload, modelPath)
                             : std::string();
      auto it = parameters.find(name);
      if (name.empty() || it == parameters.end()) {
        graph.append(gf.all);
        continue;
      }
      // The initializer without its data, then the new raw_data.
      std::string tensor;
      int64_t count = 1;
      Reader t(gf.payload, modelPath);
      while (!t.done()) {
        Field tf = next(t);
        if (tf.number == 1 && tf.wire == 0) { // one dim
          Reader d(tf.all, modelPath);
          d.varint();
          count *= static_cast<int64_t>(d.varint());
        } else if (tf.number == 1 && tf.wire == 2) { // packed dims
          Reader d(tf.payload, modelPath);
          while (!d.done())
            count *= static_cast<int64_t>(d.varint());
        }
        if (!isTensorDataField(tf.number))
          tensor.append(tf.all);
      }
      const HostTensor &value = it->second;
      if (count != value.numElements())
        throw std::runtime_error(modelPath + ": initializer '" + name +
                                 "' has " + std::to_string(count) +
                                 " elements, the trained parameter " +
                                 std::to_string(value.numElements()));
      putBytesField(
          tensor, kTensorRawData,
          std::string_view(reinterpret_cast<const char *>(value.data.data()),
                           value.data.size()));
      putBytesField(graph, kGraphInitializer, tensor);
      replaced.insert(name);
    }
    putBytesField(out, kModelGraph, graph);
  }
  for (auto &[name, value] : parameters)
    if (!replaced.count(name))
      throw std::runtime_error(modelPath + ": the model has no initializer '" +
                               name + "'");
  writeFileAtomically(outPath, out);
  return replaced.size();
}

} // namespace gpipe::runtime
