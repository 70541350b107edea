//===- SplitForwardBackward.h - What a stage's forward keeps ----*- C++ -*-===//
#ifndef GPIPE_TRANSFORMS_SPLITFORWARDBACKWARD_H
#define GPIPE_TRANSFORMS_SPLITFORWARDBACKWARD_H

#include "Analysis/Planner/LayerTable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace gpipe {

/// The ops of `func` that its results whose attributes satisfy `wanted`
/// depend on (their backward slice).
llvm::DenseSet<mlir::Operation *>
resultSlice(mlir::func::FuncOp func,
            llvm::function_ref<bool(mlir::DictionaryAttr)> wanted);

/// The ops of @forward_backward (gpipe-autodiff) that the forward results
/// depend on: the forward phase.
llvm::DenseSet<mlir::Operation *> forwardOps(mlir::func::FuncOp fb);

/// Values cheap to rebuild where they are used instead of kept between
/// phases: parameters and constants.
bool isRematerializable(mlir::Value v);

/// The values of @forward_backward that its backward ops read from the
/// forward phase (`forward`, as forwardOps gives it) or from the data
/// inputs, in order of first use, parameters and constants left out (read
/// again where they are used): without recompute, what the forward keeps
/// for the backward of each micro-batch (gpipe-split-forward-backward's
/// stash).
llvm::SmallVector<mlir::Value>
stashedValues(mlir::func::FuncOp fb,
              const llvm::DenseSet<mlir::Operation *> &forward);

/// What the backward of `module` (its loss appended; the layers of
/// `table`) reads from the forward, by layer: the stash of a one-stage
/// plan, as gpipe-split-forward-backward keeps it (empty when the model
/// cannot be differentiated: the compile says why).
std::vector<LayerTable::StashedValue> stashByLayer(mlir::ModuleOp module,
                                                   const LayerTable &table);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_SPLITFORWARDBACKWARD_H
