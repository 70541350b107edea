//===- ConvertElementwiseToLinalg.cpp - Element-wise nn ops to linalg -----===//
#include "Transforms/Passes.h"

#include "NN/IR/NNOps.h"

#include "mlir/IR/PatternMatch.h"

namespace gpipe {
#define GEN_PASS_DEF_CONVERTELEMENTWISETOLINALG
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using gpipe::nn::ElementwiseOpInterface;

namespace {

/// The map from the iteration space of `result` to an operand broadcast
/// into it (NumPy rules: leading axes missing, size-1 axes repeated).
AffineMap broadcastMap(RankedTensorType operand, RankedTensorType result) {
  MLIRContext *ctx = result.getContext();
  int64_t rank = result.getRank(), offset = rank - operand.getRank();
  SmallVector<AffineExpr> exprs;
  for (int64_t i = 0; i < operand.getRank(); ++i)
    exprs.push_back(operand.getDimSize(i) == 1 &&
                            result.getDimSize(offset + i) != 1
                        ? getAffineConstantExpr(0, ctx)
                        : getAffineDimExpr(offset + i, ctx));
  return AffineMap::get(rank, 0, exprs, ctx);
}

/// Rewrites one element-wise op; fails (after the op reported why) when its
/// scalar computation cannot be built.
LogicalResult convert(ElementwiseOpInterface op, RewriterBase &rewriter) {
  Location loc = op->getLoc();
  SmallVector<Type> types(op->getOperandTypes());
  llvm::append_range(types, op->getResultTypes());
  for (Type t : types)
    if (cast<RankedTensorType>(t).getElementType().isUnsignedInteger())
      return op->emitOpError("on unsigned integers (")
             << t << ") is not supported by code generation yet";
  auto resultType = cast<RankedTensorType>(op->getResult(0).getType());
  SmallVector<AffineMap> maps;
  for (Value operand : op->getOperands())
    maps.push_back(
        broadcastMap(cast<RankedTensorType>(operand.getType()), resultType));
  maps.push_back(rewriter.getMultiDimIdentityMap(resultType.getRank()));
  SmallVector<utils::IteratorType> iterators(resultType.getRank(),
                                             utils::IteratorType::parallel);
  rewriter.setInsertionPoint(op);
  Value init = rewriter.create<tensor::EmptyOp>(loc, resultType.getShape(),
                                                resultType.getElementType());
  bool bodyFailed = false;
  auto generic = rewriter.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, op->getOperands(), ValueRange{init}, maps,
      iterators, [&](OpBuilder &b, Location bodyLoc, ValueRange args) {
        Value v = op.buildScalar(b, bodyLoc, args.drop_back());
        if (!v) {
          bodyFailed = true;
          v = args.back();
        }
        b.create<linalg::YieldOp>(bodyLoc, v);
      });
  if (bodyFailed) {
    rewriter.eraseOp(generic);
    rewriter.eraseOp(init.getDefiningOp());
    return failure();
  }
  rewriter.replaceOp(op, generic->getResults());
  return success();
}

struct ConvertElementwiseToLinalgPass
    : public gpipe::impl::ConvertElementwiseToLinalgBase<
          ConvertElementwiseToLinalgPass> {
  void runOnOperation() override {
    SmallVector<ElementwiseOpInterface> ops;
    getOperation()->walk([&](ElementwiseOpInterface op) {
      if (op.hasScalarForm())
        ops.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    bool failedAny = false;
    for (ElementwiseOpInterface op : ops)
      failedAny |= failed(convert(op, rewriter));
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace
