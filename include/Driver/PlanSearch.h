//===- PlanSearch.h - The plans a set of cores can run ---------*- C++ -*-===//
//
// The plan search: for the CPU cores the user gave (of one process, or of
// each MPI rank), every plan of a grid — data-parallel replicas over the
// ranks, stages (each rank's cores split into contiguous groups, one stage
// each), micro-batches dividing a replica's batch, schedule, recompute —
// cut by the partitioner's dynamic program and predicted by the plan cost
// model over the verified schedule, so that a plan is weighed as it would
// be compiled. The driver compares the compiled plan with the best of them
// (gpipe-opt's report), compiles the best (--plan=auto) or lists them
// (--emit=plans).
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_DRIVER_PLANSEARCH_H
#define GPIPE_DRIVER_PLANSEARCH_H

#include "Analysis/Planner/LayerTable.h"
#include "Analysis/Planner/PipelinePlan.h"
#include "Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace gpipe {

struct PlanCandidate {
  /// Devices and ranks, replicas, micro-batches, schedule, recompute and
  /// the cuts.
  PipelinePlan plan;
  int64_t replicaBatch = 1; // samples a replica takes per step
  double step = 0;          // predicted seconds per step
  double bubble = 0;        // predicted idle share
  double memory = 0;        // the largest stage's bytes (the partitioner's)
  bool fits = true;         // every stage within its device's memory
  /// --memory-per-device it was weighed for (0: the profiles').
  int64_t memoryPerDevice = 0;

  /// The gpipe-opt flags that compile it ("--devices=cpu:0-1
  /// --micro-batches=1 --schedule=gpipe --recompute=never"; with replicas
  /// also --data-parallel=D and the replica's --batch-size; with a memory
  /// per device, --memory-per-device).
  std::string flags() const;
  /// Whether `other` runs the same devices and ranks, replicas,
  /// micro-batches, schedule and recompute.
  bool sameAs(const PipelinePlan &other) const;
};

struct PlanSearchSpace {
  /// The cores each rank may use, in order (rank r at index r); one entry
  /// for a process without rank prefixes (whose stages are all rank 0's).
  std::vector<std::vector<int>> rankCores;
  int64_t batch = 1; // samples per optimizer step, all replicas together
  int64_t maxMicroBatches = 32;
  std::string profiles; // --device-profile (empty: built-in)
  int64_t optimizerSlots = 0;
  /// --memory-per-device in bytes (0: the profiles' memory).
  int64_t memoryPerDevice = 0;
};

/// The cores of a CPU-only device list ("cpu:0,cpu:1", "cpu:0-3"), each
/// once, in order; empty when it names a GPU.
std::vector<int> coresOf(const std::vector<Device> &devices);

/// Every plan of the grid, fastest first (plans that do not fit memory
/// last); `table` describes the model with its loss. Errors name a bad
/// profile.
llvm::Expected<std::vector<PlanCandidate>>
searchPlans(const LayerTable &table, const PlanSearchSpace &space,
            mlir::MLIRContext *context);

/// The fastest candidate on one stage (all the cores, the whole batch if
/// it fits), or null.
const PlanCandidate *bestOneStage(const std::vector<PlanCandidate> &plans);

/// The candidates as a table (--emit=plans); `compiled` (may be null) is
/// marked.
void printPlans(const std::vector<PlanCandidate> &plans, int64_t batch,
                const PipelinePlan *compiled, llvm::raw_ostream &os);

/// After the stage report: the compiled plan (predicted `step` seconds)
/// against one stage on all the cores and against the fastest plan found.
void printPlanComparison(const PipelinePlan &compiled, double step,
                         const std::vector<PlanCandidate> &plans,
                         llvm::raw_ostream &os);

/// Weighs the plans for `space` on `module` (imported, its loss not yet
/// appended; left as it is): the loss is appended to a copy, whose layers
/// are tabled with the cost table's entries (`costTable`, may be empty).
llvm::Expected<std::vector<PlanCandidate>>
weighPlans(mlir::ModuleOp module, const AppendLossOptions &loss,
           llvm::StringRef costTable, const PlanSearchSpace &space);

} // namespace gpipe

#endif // GPIPE_DRIVER_PLANSEARCH_H
