//===- ScheduleGenerator.cpp - Schedule kinds as data ---------------------===//
#include "Analysis/Planner/ScheduleGenerator.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

using namespace gpipe;

namespace {

/// GPipe (Huang et al. 2019): every forward, then every backward in
/// reverse order; M micro-batches alive on every stage.
llvm::SmallVector<StageActions> gpipeSchedule(int64_t k, int64_t m) {
  llvm::SmallVector<StageActions> stages(k);
  for (StageActions &actions : stages) {
    for (int64_t mb = 0; mb < m; ++mb)
      actions.push_back({InstructionOp::Forward, mb});
    for (int64_t mb = m - 1; mb >= 0; --mb)
      actions.push_back({InstructionOp::Backward, mb});
  }
  return stages;
}

/// 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs K - s - 1
/// forwards ahead, then alternates one forward and one backward, then
/// drains; at most K - s micro-batches alive.
llvm::SmallVector<StageActions> oneFOneBSchedule(int64_t k, int64_t m) {
  llvm::SmallVector<StageActions> stages(k);
  for (int64_t s = 0; s < k; ++s) {
    StageActions &actions = stages[s];
    int64_t warmup = std::min(k - s - 1, m), f = 0, b = 0;
    while (f < warmup)
      actions.push_back({InstructionOp::Forward, f++});
    while (f < m) {
      actions.push_back({InstructionOp::Forward, f++});
      actions.push_back({InstructionOp::Backward, b++});
    }
    while (b < m)
      actions.push_back({InstructionOp::Backward, b++});
  }
  return stages;
}

/// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the
/// backward in two parts, B (the input gradients the previous stage waits
/// for) and W (the weights' gradients, which only the optimizer needs).
/// Stage s runs 1F1B's K - s - 1 forwards ahead, then s rounds of a forward
/// and a B whose W waits, then rounds of F, B and the oldest waiting W,
/// then the remaining Bs each with a W, then the Ws left. The Ws a stage
/// holds back fill the drain that 1F1B leaves idle: with F, B and W of
/// one time unit each, the bubble falls from 1F1B's (K-1)(F+B+W) to
/// (K-1)(F+B-W). Every stage keeps at most K micro-batches between their
/// forward and their W: the most 1F1B keeps on its first stage.
llvm::SmallVector<StageActions> zeroBubbleH1Schedule(int64_t k, int64_t m) {
  llvm::SmallVector<StageActions> stages(k);
  for (int64_t s = 0; s < k; ++s) {
    StageActions &actions = stages[s];
    int64_t f = 0, b = 0, w = 0;
    auto forward = [&] { actions.push_back({InstructionOp::Forward, f++}); };
    auto input = [&] {
      actions.push_back({InstructionOp::BackwardInput, b++});
    };
    auto weight = [&] {
      actions.push_back({InstructionOp::BackwardWeight, w++});
    };
    for (int64_t i = 0; i < k - s - 1 && f < m; ++i)
      forward();
    for (int64_t i = 0; i < s && f < m; ++i) {
      forward();
      input();
    }
    while (f < m) {
      forward();
      input();
      weight();
    }
    while (b < m) {
      input();
      weight();
    }
    while (w < m)
      weight();
  }
  return stages;
}

const ScheduleKindInfo kinds[] = {
    {ScheduleKind::GPipe, "gpipe", gpipeSchedule,
     [](int64_t, int64_t m, int64_t) { return m; },
     "all forwards, then all backwards (M micro-batches alive)"},
    {ScheduleKind::OneFOneB, "1f1b", oneFOneBSchedule,
     [](int64_t k, int64_t m, int64_t s) { return std::min(m, k - s); },
     "one forward, one backward in the steady state (K - s alive on stage "
     "s)"},
    {ScheduleKind::ZeroBubbleH1, "zb-h1", zeroBubbleH1Schedule,
     [](int64_t k, int64_t m, int64_t) { return std::min(m, k); },
     "1F1B with each backward split in input and weight gradients, the "
     "weights' held back to fill the drain (K alive on every stage)",
     /*splitsBackward=*/true},
};

} // namespace

llvm::ArrayRef<ScheduleKindInfo> gpipe::scheduleKinds() { return kinds; }

const ScheduleKindInfo &gpipe::scheduleKindInfo(ScheduleKind kind) {
  return *llvm::find_if(
      kinds, [&](const ScheduleKindInfo &info) { return info.kind == kind; });
}

std::string gpipe::scheduleKindNames() {
  std::string names;
  for (size_t i = 0; i < std::size(kinds); ++i)
    names += (i == 0                      ? ""
              : i + 1 == std::size(kinds) ? " or "
                                          : ", ") +
             kinds[i].name.str();
  return names;
}

int64_t gpipe::maxInFlight(llvm::ArrayRef<ScheduleAction> actions) {
  int64_t alive = 0, most = 0;
  for (const ScheduleAction &a : actions) {
    if (a.op == InstructionOp::Forward)
      most = std::max(most, ++alive);
    else if (a.op == InstructionOp::Backward ||
             a.op == InstructionOp::BackwardWeight)
      --alive;
  }
  return most;
}
