//===- SplitForwardBackward.h - What a stage's forward keeps ----*- C++ -*-===//
#ifndef GPIPE_TRANSFORMS_SPLITFORWARDBACKWARD_H
#define GPIPE_TRANSFORMS_SPLITFORWARDBACKWARD_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

namespace gpipe {

/// The ops of @forward_backward (gpipe-autodiff) that the forward results
/// depend on: the forward phase.
llvm::DenseSet<mlir::Operation *> forwardOps(mlir::func::FuncOp fb);

/// The values of @forward_backward that its backward ops read from the
/// forward phase (`forward`, as forwardOps gives it) or from the data
/// inputs, in order of first use, parameters and constants left out (read
/// again where they are used): without recompute, what the forward keeps
/// for the backward of each micro-batch (gpipe-split-forward-backward's
/// stash).
llvm::SmallVector<mlir::Value>
stashedValues(mlir::func::FuncOp fb,
              const llvm::DenseSet<mlir::Operation *> &forward);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_SPLITFORWARDBACKWARD_H
