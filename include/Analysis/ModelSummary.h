//===- ModelSummary.h - A human-readable summary of a model -----*- C++ -*-===//
#ifndef GPIPE_ANALYSIS_MODELSUMMARY_H
#define GPIPE_ANALYSIS_MODELSUMMARY_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace gpipe {

/// Prints the model's inputs, outputs, parameters and a per-op table of
/// counts, FLOPs and bytes moved (from CostOpInterface) for @forward.
void printModelSummary(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_MODELSUMMARY_H
