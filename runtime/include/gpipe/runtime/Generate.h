// Text generation with a byte-level language model.
#ifndef GPIPE_RUNTIME_GENERATE_H
#define GPIPE_RUNTIME_GENERATE_H

#include <cstdint>
#include <functional>
#include <string>

namespace gpipe::runtime {

class InferenceSession;

struct GenerateOptions {
  std::string prompt;
  int64_t count = 200;      ///< bytes to generate
  double temperature = 0.0; ///< 0: greedy (the most likely byte)
  uint64_t seed = 0;        ///< of the sampling (temperature > 0)
};

/// Continues `prompt` byte by byte with a model whose input is int64 token
/// ids [batch, T] and whose output is logits [batch, T, V] (V >= 256, a
/// causal model): each step runs the last T bytes of the text (padded at
/// the end) and draws the byte after the last one from the logits at its
/// position. `emit` receives each new byte as it comes. Returns the bytes
/// generated; throws InputError when the bundle is not such a model.
std::string generateBytes(InferenceSession &session,
                          const GenerateOptions &options,
                          const std::function<void(char)> &emit = {});

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_GENERATE_H
