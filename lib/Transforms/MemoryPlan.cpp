//===- MemoryPlan.cpp - Offsets of buffers in one arena -------------------===//
#include "Transforms/MemoryPlan.h"

#include <algorithm>
#include <numeric>

using namespace gpipe;

MemoryPlan gpipe::planMemory(llvm::ArrayRef<BufferRequest> requests,
                             int64_t alignment) {
  auto alignUp = [&](int64_t v) {
    return (v + alignment - 1) / alignment * alignment;
  };
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].size > requests[b].size;
  });
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferRequest &r = requests[i];
    if (!r.fixedOffset)
      continue;
    plan.offsets[i] = *r.fixedOffset;
    plan.size = std::max(plan.size, alignUp(*r.fixedOffset + r.size));
    placed.push_back(i);
  }
  for (size_t i : order) {
    const BufferRequest &r = requests[i];
    if (r.fixedOffset)
      continue;
    // Memory ranges taken by placed buffers live at the same time as r.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (size_t j : placed) {
      const BufferRequest &o = requests[j];
      if (o.begin <= r.end && r.begin <= o.end)
        taken.emplace_back(plan.offsets[j], plan.offsets[j] + o.size);
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (auto [start, stop] : taken) {
      if (offset + r.size <= start)
        break;
      offset = std::max(offset, alignUp(stop));
    }
    plan.offsets[i] = offset;
    plan.size = std::max(plan.size, alignUp(offset + r.size));
    placed.push_back(i);
  }
  return plan;
}
