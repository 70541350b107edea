//===- gpipe-schedule-bubbles.cpp - Each schedule kind's bubble -------===//
//
// gpipe-schedule-bubbles [K...]: for K stages of equal durations (a
// forward F, a backward's input part B and weight part W of one unit each,
// a whole backward two) and M = 8, 16, 32, 64 micro-batches, every
// registered schedule kind built as the compiler builds it, verified, and
// played by the compiler's schedule simulator; its idle share beside the
// papers' formulas: GPipe and 1F1B (K-1)/(M+K-1), ZB-H1 (K-1)(F+B-W) idle
// per stage, (K-1)/(3M+K-1), interleaved 1F1B with v = 2 stages per device
// (each 1/v of the device's model) (K-1)/(vM+K-1), ZB-V (two stages on each
// device as a V, each half of the device's model) the fill of its first
// forwards, (K-1)/(6M+K-1). Markdown rows for
// bench/run_pipeline_benchmarks.py.
//
//===----------------------------------------------------------------------===//
#include "Analysis/Planner/ScheduleGenerator.h"
#include "Analysis/Planner/ScheduleSimulator.h"
#include "GPipe/IR/GPipeDialect.h"
#include "GPipe/IR/GPipeOps.h"
#include "Transforms/Schedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <string>

using namespace gpipe;

namespace {

/// The papers' idle share of `kind` on K equal stages at M micro-batches.
double formula(ScheduleKind kind, double k, double m, double v) {
  if (kind == ScheduleKind::ZeroBubbleH1)
    return (k - 1) / (3 * m + k - 1);
  if (kind == ScheduleKind::Interleaved1F1B)
    return (k - 1) / (v * m + k - 1);
  // ZB-V: the paper's (K-1)(F+B-2W) idle per device, none at F = B = W,
  // counts a step's fill as overlapping the step before; in one step on its
  // own the first forwards reach device d after d forwards of a chunk: (K-1)
  // of 6M units idle per device.
  if (kind == ScheduleKind::ZeroBubbleV)
    return (k - 1) / (6 * m + k - 1);
  return (k - 1) / (m + k - 1);
}

} // namespace

int main(int argc, char **argv) {
  llvm::SmallVector<int64_t> stages;
  for (int i = 1; i < argc; ++i)
    stages.push_back(std::atoll(argv[i]));
  if (stages.empty())
    stages = {4, 8};
  mlir::MLIRContext context;
  context.loadDialect<GPipeDialect>();
  llvm::outs() << "| schedule | K | M | predicted bubble | paper's formula |\n"
               << "|---|---|---|---|---|\n";
  constexpr int64_t kVirtual = 2; // stages per device, interleaved
  for (const ScheduleKindInfo &info : scheduleKinds())
    for (int64_t k : stages)
      for (int64_t m : {8, 16, 32, 64}) {
        ScheduleRequest request;
        request.kind = info.kind;
        request.microBatches = m;
        // Interleaved: v stages on each of the K devices, stage s on
        // device s mod K, each a v-th of the device's model.
        int64_t v = info.interleaves ? kVirtual : 1, n = k * v;
        for (int64_t s = 0; s < n; ++s) {
          request.devices.push_back(
              "cpu:" + std::to_string(deviceOfStage(s, n, v, info.layout)));
          request.recompute.push_back(false);
        }
        auto module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
        mlir::OpBuilder b = mlir::OpBuilder::atBlockEnd(module.getBody());
        ScheduleOp schedule = buildSchedule(b, module.getLoc(), request);
        if (mlir::failed(mlir::verify(schedule))) {
          llvm::errs() << "schedule " << info.name << " K=" << k << " M=" << m
                       << " does not verify\n";
          return 1;
        }
        StageTimes unit;
        double share = 1.0 / static_cast<double>(v);
        unit.forward = share;
        unit.backward = 2 * share;
        unit.backwardInput = share;
        unit.backwardWeight = share;
        llvm::SmallVector<StageTimes> times(n, unit);
        SchedulePrediction p = predictSchedule(schedule, times);
        llvm::outs() << "| " << info.name
                     << (v > 1 ? " (v=" + std::to_string(v) + ")" : "") << " | "
                     << k << " | " << m << " | "
                     << llvm::format("%.1f%%", 100 * p.bubble) << " | "
                     << llvm::format("%.1f%%",
                                     100 * formula(info.kind, k, m, v))
                     << " |\n";
        module.erase();
      }
  return 0;
}
