//===- OutlineStages.h - One module per pipeline stage ----------*- C++ -*-===//
#ifndef GPIPE_TRANSFORMS_OUTLINESTAGES_H
#define GPIPE_TRANSFORMS_OUTLINESTAGES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"

namespace gpipe {

/// For each gpipe.stage of @forward (after gpipe-partition), a module of
/// its own: the parameters it reads and @forward, the stage body, whose
/// arguments and results carry the stage's input and output names
/// (gpipe.name). Each module is marked gpipe.stage_index and
/// gpipe.num_stages and then compiles like a whole model. A trainable
/// parameter read by two stages is an error (its gradient would be split).
mlir::FailureOr<llvm::SmallVector<mlir::OwningOpRef<mlir::ModuleOp>>>
outlineStages(mlir::ModuleOp module);

} // namespace gpipe

#endif // GPIPE_TRANSFORMS_OUTLINESTAGES_H
