// The checkpoint file: a training session's parameters, optimizer state,
// step count and the trainer's own state, written atomically, checked by
// CRC-32 when read (docs/training.md).
#ifndef GPIPE_RUNTIME_CHECKPOINT_H
#define GPIPE_RUNTIME_CHECKPOINT_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::runtime {

struct Checkpoint {
  /// Identifies the bundle the state belongs to.
  uint32_t model = 0;
  int64_t steps = 0;
  /// The rows one step took (the global batch: replicas x the compiled
  /// batch): a step means something else at another batch.
  int64_t batch = 0;
  /// The trainer's own state, stored as is.
  uint64_t extra = 0;
  /// The bytes of every state tensor, in the bundle's order.
  std::vector<std::string> tensors;
};

/// Writes `checkpoint` to `path` atomically (a temporary file renamed into
/// place).
void writeCheckpoint(const std::string &path, const Checkpoint &checkpoint);
/// Reads a checkpoint; throws BundleError if the file is missing, damaged
/// or of another format.
Checkpoint readCheckpoint(const std::string &path);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_CHECKPOINT_H
