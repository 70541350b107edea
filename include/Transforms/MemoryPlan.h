//===- MemoryPlan.h - Offsets of buffers in one arena -----------*- C++ -*-===//
//
// Static memory planning: buffers with known sizes and live ranges get byte
// offsets in one arena, so that buffers whose live ranges overlap never
// overlap in memory and the others may share it.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_TRANSFORMS_MEMORYPLAN_H
#define GPIPE_TRANSFORMS_MEMORYPLAN_H

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace gpipe {

struct BufferRequest {
  int64_t size;  // bytes
  int64_t begin; // first step the buffer is live
  int64_t end;   // last step the buffer is live (inclusive)
  /// Where the buffer must sit (an aligned offset): a value another plan
  /// of the same arena put there (the forward's kept values, read where
  /// the forward left them by a backward sharing its arena).
  std::optional<int64_t> fixedOffset = std::nullopt;
};

struct MemoryPlan {
  std::vector<int64_t> offsets; // one per request, multiples of alignment
  int64_t size = 0;             // bytes of the arena
};

/// Greedy placement: the fixed buffers where they must be, then the others,
/// largest first, each at the lowest aligned offset free of every placed
/// buffer whose live range overlaps its own.
MemoryPlan planMemory(llvm::ArrayRef<BufferRequest> requests,
                      int64_t alignment = 64);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_MEMORYPLAN_H
