#include "gpipe/runtime/Generate.h"

#include "gpipe/runtime/InferenceSession.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace gpipe::runtime;

std::string
gpipe::runtime::generateBytes(InferenceSession &session,
                              const GenerateOptions &options,
                              const std::function<void(char)> &emit) {
  const Bundle &bundle = session.bundle();
  if (bundle.inputs.size() != 1 || bundle.outputs.size() != 1)
    throw InputError("--generate needs a model with one input (token ids) "
                     "and one output (logits); this bundle has " +
                     std::to_string(bundle.inputs.size()) + " and " +
                     std::to_string(bundle.outputs.size()));
  const TensorSlot &in = bundle.inputs[0], &out = bundle.outputs[0];
  if (in.dtype != DType::I64 || in.shape.size() != 2)
    throw InputError("--generate needs token ids int64 [batch, T] as the "
                     "model's input; '" +
                     in.name + "' is " + std::string(dtypeName(in.dtype)) +
                     " of rank " + std::to_string(in.shape.size()));
  int64_t window = in.shape[1];
  if (out.dtype != DType::F32 || out.shape.size() != 3 ||
      out.shape[1] != window || out.shape[2] < 256)
    throw InputError("--generate needs logits float32 [batch, T, V] with V "
                     ">= 256 (one per byte) as the model's output; '" +
                     out.name + "' is not");
  if (options.temperature < 0 || !std::isfinite(options.temperature))
    throw InputError("--temperature must be 0 (greedy) or positive");
  int64_t vocab = out.shape[2];
  std::string text = options.prompt.empty() ? "\n" : options.prompt;
  std::string generated;
  std::mt19937_64 rng(options.seed);
  HostTensor ids;
  ids.dtype = DType::I64;
  ids.shape = {1, window};
  ids.data.assign(window * sizeof(int64_t), std::byte{0});
  auto *id = reinterpret_cast<int64_t *>(ids.data.data());
  for (int64_t n = 0; n < options.count; ++n) {
    int64_t start = std::max<int64_t>(0, text.size() - window);
    int64_t used = text.size() - start;
    std::fill(id, id + window, 0);
    for (int64_t i = 0; i < used; ++i)
      id[i] = static_cast<unsigned char>(text[start + i]);
    std::map<std::string, HostTensor> outputs = session.run({{in.name, ids}});
    const float *logits =
        reinterpret_cast<const float *>(outputs.at(out.name).data.data()) +
        (used - 1) * vocab;
    int next = 0;
    if (options.temperature == 0) {
      next = std::max_element(logits, logits + 256) - logits;
    } else {
      float top = *std::max_element(logits, logits + 256);
      std::vector<double> weights(256);
      for (int b = 0; b < 256; ++b)
        weights[b] = std::exp((logits[b] - top) / options.temperature);
      next =
          std::discrete_distribution<int>(weights.begin(), weights.end())(rng);
    }
    char c = static_cast<char>(next);
    text.push_back(c);
    generated.push_back(c);
    if (emit)
      emit(c);
  }
  return generated;
}
