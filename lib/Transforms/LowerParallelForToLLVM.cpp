//===- LowerParallelForToLLVM.cpp - gpipe.parallel_for to a runtime call --===//
//
// After the stage code is in the LLVM dialect, each gpipe.parallel_for
// becomes a call of the runtime's gpipe_parallel_for with the address of
// the outlined loop body (docs/bundle.md).
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"

#include "GPipe/IR/GPipeOps.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace gpipe {
#define GEN_PASS_DEF_LOWERPARALLELFORTOLLVM
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

constexpr llvm::StringLiteral kRuntimeEntry = "gpipe_parallel_for";

struct LowerParallelForToLLVMPass
    : public gpipe::impl::LowerParallelForToLLVMBase<
          LowerParallelForToLLVMPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ParallelForOp> ops;
    module.walk([&](ParallelForOp op) { ops.push_back(op); });
    if (ops.empty())
      return;
    MLIRContext *context = module.getContext();
    auto i64 = IntegerType::get(context, 64);
    auto ptr = LLVM::LLVMPointerType::get(context);
    // void gpipe_parallel_for(int64_t ctx, void (*body)(...), int64_t n)
    auto entry = module.lookupSymbol<LLVM::LLVMFuncOp>(kRuntimeEntry);
    if (!entry) {
      OpBuilder b(module.getBodyRegion());
      b.setInsertionPointToStart(module.getBody());
      entry = b.create<LLVM::LLVMFuncOp>(
          module.getLoc(), kRuntimeEntry,
          LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(context),
                                      {i64, ptr, i64}));
    }
    for (ParallelForOp op : ops) {
      auto body = module.lookupSymbol<LLVM::LLVMFuncOp>(op.getCallee());
      if (!body) {
        op.emitOpError("'") << op.getCallee()
                            << "' is not an llvm.func; run this pass after "
                               "the conversion of func to LLVM";
        return signalPassFailure();
      }
      if (op.getCtx().getType() != i64) {
        op.emitOpError("ctx must be i64");
        return signalPassFailure();
      }
      OpBuilder b(op);
      Value address = b.create<LLVM::AddressOfOp>(op.getLoc(), body);
      Value extent = b.create<LLVM::ConstantOp>(
          op.getLoc(), i64, b.getI64IntegerAttr(op.getExtent()));
      b.create<LLVM::CallOp>(op.getLoc(), entry,
                             ValueRange{op.getCtx(), address, extent});
      op.erase();
    }
  }
};

} // namespace
