//===- StageWiring.h - How a pipeline's stages connect ----------*- C++ -*-===//
//
// The part of a pipeline bundle's manifest that tells the runtime how each
// stage's phases connect, by index, so that it never matches names: the
// layouts of the messages between neighbouring stages, what the backward
// reads from the forward (the stash) or the batch, which optimizer input
// sums which gradient, the hyper-parameters, the loss and the model output
// (docs/bundle.md, "wiring").
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_BUNDLE_STAGEWIRING_H
#define GPIPE_BUNDLE_STAGEWIRING_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/JSON.h"

namespace gpipe {

/// The lowered phases of one training stage.
struct StagePhases {
  /// `backward` is the whole backward, or its input part when
  /// `backwardWeight` (its weight part) is set.
  mlir::func::FuncOp forward, backward, optimizer, backwardWeight;
  /// The stage's parameters, in the order of the manifest's list.
  llvm::SmallVector<llvm::StringRef> parameters;
};

/// The "wiring" object of every stage, in stage order. Fails with an error
/// on the stage when its phases do not fit together (an internal error of
/// the passes before).
mlir::FailureOr<llvm::SmallVector<llvm::json::Object>>
wireStages(llvm::ArrayRef<StagePhases> stages);

/// The "wiring" of every stage of an inference bundle of several stages,
/// one forward each: the activations each sends and receives, and the last
/// stage's model output.
mlir::FailureOr<llvm::SmallVector<llvm::json::Object>>
wireInferenceStages(llvm::ArrayRef<mlir::func::FuncOp> forwards);

} // namespace gpipe

#endif // GPIPE_BUNDLE_STAGEWIRING_H
