//===- BatchPlacement.h - Where the batch sits in each value ----*- C++ -*-===//
//
// A model's inputs carry the batch on their first axis. Ops move it: a
// Reshape can fold it into a larger dimension (logits [B, T, V] viewed as
// [B * T, V], or an attention's [B * heads, T, d]), a Transpose moves it to
// another axis. The runtime needs to know where it is in each output to
// split a large inference batch into runs of the compiled one and put the
// pieces of every output in their places.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_BATCHPLACEMENT_H
#define GPIPE_ANALYSIS_BATCHPLACEMENT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>

namespace gpipe {

/// The batch sits in dimension `axis`, whose size is (outer * batch *
/// inner): `inner` consecutive elements of that dimension belong to one
/// sample (1 when the dimension is the batch itself).
struct BatchPlacement {
  int64_t axis = 0;
  int64_t inner = 1;
  bool operator==(const BatchPlacement &o) const {
    return axis == o.axis && inner == o.inner;
  }
};

/// Where a batch of `batch` samples placed at `p` in a tensor of shape
/// `in` sits after a reshape to `out`. A reshape keeps the row-major
/// order, so each sample keeps its element stride (p.inner times the
/// dimensions after p.axis): the output dimension whose trailing
/// dimensions divide that stride and whose own span holds the whole batch
/// carries it. Nullopt when the reshape splits the batch over dimensions.
std::optional<BatchPlacement>
reshapedBatchPlacement(llvm::ArrayRef<int64_t> in, BatchPlacement p,
                       llvm::ArrayRef<int64_t> out, int64_t batch);

/// The permutation of a transpose from a tensor of rank `rank` holding the
/// batch first to one holding it at `axis` (a data input batch-first to a
/// sequence-first model's [T, B]): result dimension j is the operand's
/// j + 1 before `axis`, its 0 at `axis`, its j after.
llvm::SmallVector<int64_t> batchToAxisPermutation(int64_t rank, int64_t axis);

/// The placement of the batch in each result of `forward`, whose arguments
/// all carry a batch of `batch` rows on axis 0; nullopt for a result that
/// does not carry it (a scalar, a reduction over the batch) or where the
/// analysis cannot prove where it is.
llvm::SmallVector<std::optional<BatchPlacement>>
resultBatchPlacements(mlir::func::FuncOp forward, int64_t batch);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_BATCHPLACEMENT_H
