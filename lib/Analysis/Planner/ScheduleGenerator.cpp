//===- ScheduleGenerator.cpp - Schedule kinds as data ---------------------===//
#include "Analysis/Planner/ScheduleGenerator.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cassert>

using namespace gpipe;

namespace {

/// GPipe (Huang et al. 2019): every forward, then every backward in
/// reverse order; M micro-batches alive on every stage.
llvm::SmallVector<StageActions> gpipeSchedule(int64_t k, int64_t m, int64_t) {
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
llvm::SmallVector<StageActions> oneFOneBSchedule(int64_t k, int64_t m,
                                                 int64_t) {
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
llvm::SmallVector<StageActions> zeroBubbleH1Schedule(int64_t k, int64_t m,
                                                     int64_t) {
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

/// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM): v stages on each
/// of the K devices, stage c * K + d on device d. A device runs its
/// stages' forwards in rounds of K micro-batches, its first stage's K,
/// then its second's, ..., and its backwards likewise from its last stage
/// down; (K - d - 1) * 2 + (v - 1) * K forwards ahead, then one forward
/// and one backward in turn, then the backwards left. Each stage's
/// backwards run in the order of its micro-batches, as 1F1B's. The fill
/// and drain take (K - 1) stage steps of 1/v of a device's model each:
/// the bubble falls from 1F1B's (K-1)/(M+K-1) to (K-1)/(vM+K-1).
/// Needs M a multiple of K (interleavingError).
llvm::SmallVector<StageActions> interleavedSchedule(int64_t numStages,
                                                    int64_t m, int64_t v) {
  if (v <= 1)
    return oneFOneBSchedule(numStages, m, 1);
  int64_t k = numStages / v;
  assert(k * v == numStages && m % k == 0 && "an interleavable layout");
  llvm::SmallVector<StageActions> stages(numStages);
  int64_t total = m * v;
  // The i-th forward (backward) step of device d: its stage and
  // micro-batch.
  auto stageOf = [&](int64_t d, int64_t i, bool forward) {
    int64_t chunk = (i % (k * v)) / k;
    return (forward ? chunk : v - 1 - chunk) * k + d;
  };
  auto microBatchOf = [&](int64_t i) { return (i / (k * v)) * k + i % k; };
  for (int64_t d = 0; d < k; ++d) {
    int64_t turn = 0;
    auto step = [&](int64_t i, bool forward) {
      stages[stageOf(d, i, forward)].push_back(
          {forward ? InstructionOp::Forward : InstructionOp::Backward,
           microBatchOf(i), turn++});
    };
    int64_t warmup = std::min((k - d - 1) * 2 + (v - 1) * k, total);
    for (int64_t i = 0; i < warmup; ++i)
      step(i, true);
    for (int64_t i = 0; i < total - warmup; ++i) {
      step(warmup + i, true);
      step(i, false);
    }
    for (int64_t i = std::max<int64_t>(0, total - warmup); i < total; ++i)
      step(i, false);
  }
  return stages;
}

/// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section
/// 6): 2K stages laid out as a V on K devices, device d holding stage d
/// (its first chunk, a) and stage 2K - 1 - d (its second, c), each backward
/// in two parts as in ZB-H1. Device d's order: 2(K-d)-1 forwards of a;
/// d rounds of a forward of c and one of a; K-d rounds of F, B and W of c;
/// then rounds of (F of a while some are left), B and W of a, and F, B and
/// W of c, until every forward has run; then d rounds of the Bs of a and c
/// (their Ws held back), K-d of B and W of a, and the Ws left, c's first.
/// With F, B and W of a time unit each per chunk the V keeps every device
/// busy from its first forward to its last W: the first stage's device is
/// also the last's, so the drain of one chunk fills with the other's work.
/// Built for max(M, 2K - 1) micro-batches, those past M left out (the
/// order of the rest stands).
llvm::SmallVector<StageActions> zeroBubbleVSchedule(int64_t numStages,
                                                    int64_t m, int64_t v) {
  assert(v == 2 && numStages % 2 == 0 && "two stages on each device");
  (void)v;
  int64_t k = numStages / 2, n = std::max(m, 2 * k - 1);
  llvm::SmallVector<StageActions> stages(numStages);
  for (int64_t d = 0; d < k; ++d) {
    int64_t a = d, c = numStages - 1 - d;
    // Each chunk's next forward, input part and weight part.
    struct Next {
      int64_t f = 0, b = 0, w = 0;
    } next[2];
    int64_t turn = 0;
    auto step = [&](int chunk, InstructionOp op) {
      Next &x = next[chunk];
      int64_t &count = op == InstructionOp::Forward         ? x.f
                       : op == InstructionOp::BackwardInput ? x.b
                                                            : x.w;
      int64_t mb = count++;
      if (mb < m)
        stages[chunk == 0 ? a : c].push_back({op, mb, turn++});
    };
    auto fbw = [&](int chunk) {
      step(chunk, InstructionOp::Forward);
      step(chunk, InstructionOp::BackwardInput);
      step(chunk, InstructionOp::BackwardWeight);
    };
    for (int64_t i = 0; i < 2 * (k - d) - 1; ++i)
      step(0, InstructionOp::Forward);
    for (int64_t i = 0; i < d; ++i) {
      step(1, InstructionOp::Forward);
      step(0, InstructionOp::Forward);
    }
    for (int64_t i = 0; i < k - d; ++i)
      fbw(1);
    while (next[0].f < n || next[1].f < next[0].f) {
      if (next[0].f < n)
        step(0, InstructionOp::Forward);
      step(0, InstructionOp::BackwardInput);
      step(0, InstructionOp::BackwardWeight);
      fbw(1);
    }
    for (int64_t i = 0; i < d; ++i) {
      step(0, InstructionOp::BackwardInput);
      step(1, InstructionOp::BackwardInput);
    }
    for (int64_t i = 0; i < k - d; ++i) {
      step(0, InstructionOp::BackwardInput);
      step(0, InstructionOp::BackwardWeight);
    }
    while (next[1].w < n)
      step(1, InstructionOp::BackwardWeight);
    while (next[0].w < n)
      step(0, InstructionOp::BackwardWeight);
    assert(next[0].b == n && next[1].b == n && next[1].f == n &&
           "every chunk's micro-batches once");
  }
  return stages;
}

const ScheduleKindInfo kinds[] = {
    {ScheduleKind::GPipe, "gpipe", gpipeSchedule,
     [](int64_t, int64_t m, int64_t, int64_t) { return m; },
     "all forwards, then all backwards (M micro-batches alive)"},
    {ScheduleKind::OneFOneB, "1f1b", oneFOneBSchedule,
     [](int64_t k, int64_t m, int64_t s, int64_t) {
       return std::min(m, k - s);
     },
     "one forward, one backward in the steady state (K - s alive on stage "
     "s)"},
    {ScheduleKind::ZeroBubbleH1, "zb-h1", zeroBubbleH1Schedule,
     [](int64_t k, int64_t m, int64_t, int64_t) { return std::min(m, k); },
     "1F1B with each backward split in input and weight gradients, the "
     "weights' held back to fill the drain (K alive on every stage)",
     /*splitsBackward=*/true},
    {ScheduleKind::Interleaved1F1B, "interleaved-1f1b", interleavedSchedule,
     // As generated: no closed form is simpler than the order itself.
     [](int64_t k, int64_t m, int64_t s, int64_t v) {
       return maxInFlight(interleavedSchedule(k, m, v)[s]);
     },
     "1F1B over v stages on each device in turns (--virtual-stages=v or "
     "the devices listed v times): the fill and drain are 1/v as long",
     /*splitsBackward=*/false, /*interleaves=*/true},
    {ScheduleKind::ZeroBubbleV, "zb-v", zeroBubbleVSchedule,
     // Device d: 2K - d of its first stage's forwards before that stage's
     // first W, d + 1 of its second's: 2K - s on stage s, as 1F1B's over
     // 2K stages.
     [](int64_t n, int64_t m, int64_t s, int64_t) {
       return std::min(m, n - s);
     },
     "ZB-H1's split backward over two stages on each device laid out as a V "
     "(--virtual-stages=2 or the devices listed forth and back: the first "
     "and the last stage on one device): the drain of one fills with the "
     "other's work",
     /*splitsBackward=*/true, /*interleaves=*/true, StageLayout::V},
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

int64_t gpipe::virtualStagesOf(llvm::ArrayRef<std::string> devices,
                               StageLayout layout) {
  int64_t n = static_cast<int64_t>(devices.size());
  auto distinct = [&](int64_t k) {
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = a + 1; b < k; ++b)
        if (devices[a] == devices[b])
          return false;
    return true;
  };
  if (layout == StageLayout::V) {
    if (n < 2 || n % 2 != 0 || !distinct(n / 2))
      return 1;
    for (int64_t s = n / 2; s < n; ++s)
      if (devices[s] != devices[n - 1 - s])
        return 1;
    return 2;
  }
  for (int64_t k = 1; k < n; ++k) {
    if (n % k != 0)
      continue;
    bool periodic = true;
    for (int64_t s = k; s < n && periodic; ++s)
      periodic = devices[s] == devices[s % k];
    if (periodic && distinct(k))
      return n / k;
  }
  return 1;
}

int64_t gpipe::deviceOfStage(int64_t stage, int64_t numStages, int64_t v,
                             StageLayout layout) {
  int64_t k = numStages / v;
  if (layout == StageLayout::V)
    return stage < k ? stage : numStages - 1 - stage;
  return stage % k;
}

std::string gpipe::layDevices(llvm::ArrayRef<std::string> devices, int64_t v,
                              StageLayout layout) {
  std::string list;
  int64_t k = static_cast<int64_t>(devices.size());
  for (int64_t s = 0; s < k * v; ++s)
    list += (s ? "," : "") + devices[deviceOfStage(s, k * v, v, layout)];
  return list;
}

std::string gpipe::interleavingError(llvm::ArrayRef<std::string> devices,
                                     int64_t microBatches, StageLayout layout) {
  int64_t v = virtualStagesOf(devices, layout);
  int64_t n = static_cast<int64_t>(devices.size());
  if (layout == StageLayout::V)
    return v == 2 ? ""
                  : "needs each device listed twice, forth and back "
                    "(--devices=cpu:0,cpu:1,cpu:1,cpu:0, or "
                    "--virtual-stages=2 with --devices=cpu:0,cpu:1)";
  if (v < 2)
    return "needs each device listed two or more times over, in the same "
           "order (--devices=cpu:0,cpu:1,cpu:0,cpu:1, or --virtual-stages=2 "
           "with --devices=cpu:0,cpu:1)";
  int64_t k = n / v;
  if (microBatches % k != 0)
    return "needs the micro-batches a multiple of the " + std::to_string(k) +
           " devices (--micro-batches=" + std::to_string(microBatches) + ")";
  return "";
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
