//===- SetPrecision.cpp - The compute type of products of matrices --------===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

namespace gpipe {
#define GEN_PASS_DEF_SETPRECISION
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;

namespace {
struct SetPrecisionPass
    : public gpipe::impl::SetPrecisionBase<SetPrecisionPass> {
  using SetPrecisionBase::SetPrecisionBase;

  void runOnOperation() override {
    if (precision == "fp32")
      return;
    if (precision != "bf16") {
      getOperation()->emitError("gpipe-set-precision: unknown precision '")
          << precision << "' (fp32 or bf16)";
      return signalPassFailure();
    }
    getOperation()->walk([](gpipe::nn::ComputeTypeOpInterface op) {
      op.setComputeType("bf16");
    });
  }
};
} // namespace
