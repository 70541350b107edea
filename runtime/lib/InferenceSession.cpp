#include "gpipe/runtime/InferenceSession.h"

#include <cstring>

namespace gpipe::runtime {

InferenceSession::InferenceSession(const std::string &bundlePath)
    : bundle_(loadBundle(bundlePath)) {
  if (bundle_.mode != "infer")
    throw BundleError(bundlePath + ": manifest.json: a '" + bundle_.mode +
                      "' bundle cannot run inference");
  stage = std::make_unique<StageExecutor>(bundle_, bundle_.stages.front());
}

int64_t InferenceSession::compiledBatch() const {
  const TensorSlot &first = bundle_.inputs.front();
  return first.shape.empty() ? 1 : first.shape.front();
}

namespace {
std::string describeSlot(const TensorSlot &s) {
  HostTensor t;
  t.dtype = s.dtype;
  t.shape = s.shape;
  return t.describe();
}
} // namespace

std::map<std::string, HostTensor>
InferenceSession::run(const std::map<std::string, HostTensor> &inputs) {
  if (bundle_.inputs.empty())
    throw InputError("the model has no inputs");
  // Check every input and find the number of rows given.
  int64_t rows = -1;
  for (const auto &[name, tensor] : inputs) {
    bool known = false;
    for (const TensorSlot &s : bundle_.inputs)
      known |= s.name == name;
    if (!known)
      throw InputError("input '" + name + "' is not an input of the model");
  }
  for (const TensorSlot &slot : bundle_.inputs) {
    auto it = inputs.find(slot.name);
    if (it == inputs.end())
      throw InputError("input '" + slot.name + "' is missing (expected " +
                       describeSlot(slot) + ")");
    const HostTensor &t = it->second;
    bool shapeOk = t.dtype == slot.dtype && t.shape.size() == slot.shape.size();
    for (size_t i = 1; shapeOk && i < slot.shape.size(); ++i)
      shapeOk = t.shape[i] == slot.shape[i];
    if (shapeOk && slot.shape.empty())
      shapeOk = t.shape.empty();
    int64_t n = slot.shape.empty() ? 1 : t.shape.front();
    if (!shapeOk || n <= 0 || (rows >= 0 && n != rows))
      throw InputError("input '" + slot.name + "' is " + t.describe() +
                       " but the model expects " + describeSlot(slot) +
                       (slot.shape.empty() ? ""
                                           : " (any number of rows, the same "
                                             "for every input)"));
    rows = n;
  }
  int64_t batch = compiledBatch();
  int64_t chunks = (rows + batch - 1) / batch;
  if (chunks > 1)
    for (const TensorSlot &slot : bundle_.outputs)
      if (slot.shape.empty() || slot.shape.front() != batch)
        throw InputError("the model was compiled for batch " +
                         std::to_string(batch) + " and its output '" +
                         slot.name + "' is not batched, so " +
                         std::to_string(rows) + " rows cannot be split");
  std::map<std::string, HostTensor> outputs;
  for (const TensorSlot &slot : bundle_.outputs) {
    HostTensor t;
    t.dtype = slot.dtype;
    t.shape = slot.shape;
    if (chunks > 1 || rows != batch) {
      if (!t.shape.empty())
        t.shape.front() = rows;
    }
    t.data.resize(t.numElements() * dtypeSize(t.dtype));
    outputs[slot.name] = std::move(t);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t first = c * batch, count = std::min(batch, rows - first);
    for (const TensorSlot &slot : bundle_.inputs) {
      const HostTensor &t = inputs.at(slot.name);
      int64_t rowBytes = slot.byteSize() / std::max<int64_t>(batch, 1);
      if (slot.shape.empty())
        rowBytes = slot.byteSize();
      char *dst = stage->arena() + slot.offset;
      std::memcpy(
          dst, reinterpret_cast<const char *>(t.data.data()) + first * rowBytes,
          count * rowBytes);
      std::memset(dst + count * rowBytes, 0, (batch - count) * rowBytes);
    }
    stage->run();
    for (const TensorSlot &slot : bundle_.outputs) {
      HostTensor &t = outputs[slot.name];
      int64_t rowBytes = slot.shape.empty() || slot.shape.front() != batch
                             ? slot.byteSize()
                             : slot.byteSize() / batch;
      int64_t copyRows =
          slot.shape.empty() || slot.shape.front() != batch ? 1 : count;
      std::memcpy(reinterpret_cast<char *>(t.data.data()) + first * rowBytes,
                  stage->arena() + slot.offset, copyRows * rowBytes);
    }
  }
  return outputs;
}

} // namespace gpipe::runtime
