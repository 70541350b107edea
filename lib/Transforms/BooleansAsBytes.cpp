//===- BooleansAsBytes.cpp - i1 memory accesses as i8 ones ----------------===//
//
// LLVM keeps an i1 in memory as a byte; accessing it as an i8 (and
// truncating) computes the same and lets the loop vectorizer widen the
// loops that read masks.
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace gpipe {
#define GEN_PASS_DEF_BOOLEANSASBYTES
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

bool isBoolean(Type type) { return type.isInteger(1); }

/// load i1 -> trunc(load i8).
struct LoadBoolean : OpRewritePattern<LLVM::LoadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LLVM::LoadOp op,
                                PatternRewriter &rewriter) const override {
    if (!isBoolean(op.getType()))
      return failure();
    auto load = rewriter.create<LLVM::LoadOp>(
        op.getLoc(), rewriter.getI8Type(), op.getAddr(),
        op.getAlignment().value_or(0), op.getVolatile_(), op.getNontemporal());
    rewriter.replaceOpWithNewOp<LLVM::TruncOp>(op, op.getType(), load);
    return success();
  }
};

/// store i1 -> store(zext i8).
struct StoreBoolean : OpRewritePattern<LLVM::StoreOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LLVM::StoreOp op,
                                PatternRewriter &rewriter) const override {
    if (!isBoolean(op.getValue().getType()))
      return failure();
    Value byte = rewriter.create<LLVM::ZExtOp>(
        op.getLoc(), rewriter.getI8Type(), op.getValue());
    rewriter.replaceOpWithNewOp<LLVM::StoreOp>(
        op, byte, op.getAddr(), op.getAlignment().value_or(0),
        op.getVolatile_(), op.getNontemporal());
    return success();
  }
};

/// getelementptr over i1 elements -> over i8 ones (one byte each).
struct IndexBytes : OpRewritePattern<LLVM::GEPOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LLVM::GEPOp op,
                                PatternRewriter &rewriter) const override {
    if (!isBoolean(op.getElemType()))
      return failure();
    rewriter.modifyOpInPlace(op, [&] { op.setElemType(rewriter.getI8Type()); });
    return success();
  }
};

struct BooleansAsBytesPass
    : public gpipe::impl::BooleansAsBytesBase<BooleansAsBytesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LoadBoolean, StoreBoolean, IndexBytes>(&getContext());
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
