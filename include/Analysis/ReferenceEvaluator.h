//===- ReferenceEvaluator.h - Float64 reference semantics of nn ops -*- C++
//-*-===//
//
// A slow, direct evaluator of functions over nn and gpipe.get_parameter ops,
// computing every value in double. It is the oracle of the finite-difference
// checks of the VJP rules (gpipe-check-vjp): forward ops and the gradient
// ops that the rules emit are written here independently of the runtime's
// kernels and of the generated code.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_ANALYSIS_REFERENCEEVALUATOR_H
#define GPIPE_ANALYSIS_REFERENCEEVALUATOR_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

#include <vector>

namespace gpipe {

/// A dense row-major tensor of doubles (integer tensors hold their values
/// as doubles too).
struct RefTensor {
  llvm::SmallVector<int64_t> shape;
  std::vector<double> data;

  int64_t numElements() const;
  static RefTensor zeros(llvm::ArrayRef<int64_t> shape);
};

/// Evaluates `func` on `args`; parameters are read from `parameters` by
/// symbol name. Fails with an error at the op it cannot evaluate.
mlir::FailureOr<std::vector<RefTensor>>
evaluateReference(mlir::func::FuncOp func, llvm::ArrayRef<RefTensor> args,
                  const llvm::StringMap<RefTensor> &parameters);

/// The values of a dense elements attribute.
RefTensor toRefTensor(mlir::DenseElementsAttr attr);

} // namespace gpipe

#endif // GPIPE_ANALYSIS_REFERENCEEVALUATOR_H
