//===- OutlineParallelLoops.cpp - Element-wise loops on all cores ---------===//
//
// Moves each large element-wise linalg.generic of a lowered stage function
// into a function over a range of its outer iterations, called by the
// runtime on every core of the device (gpipe.parallel_for).
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"

#include "GPipe/IR/GPipeOps.h"

#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

namespace gpipe {
#define GEN_PASS_DEF_OUTLINEPARALLELLOOPS
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// Where a view of the stage's memory lies: its base (arena or params
/// argument) and byte range.
struct ViewRange {
  Value base;
  int64_t begin = 0, end = 0;
  bool overlaps(const ViewRange &o) const {
    return base == o.base && begin < o.end && o.begin < end;
  }
};

/// The byte range of `v` if it is a statically shaped memref.view of a
/// function argument at a constant offset, or such a view collapsed
/// (gpipe-collapse-elementwise-loops).
std::optional<ViewRange> viewRange(Value v) {
  Value base = v;
  while (auto collapse = base.getDefiningOp<memref::CollapseShapeOp>())
    base = collapse.getSrc();
  auto view = base.getDefiningOp<memref::ViewOp>();
  if (!view || !isa<BlockArgument>(view.getSource()))
    return std::nullopt;
  auto type = cast<MemRefType>(view.getType());
  std::optional<int64_t> shift = getConstantIntValue(view.getByteShift());
  if (!shift || !type.hasStaticShape() || !type.getElementType().isIntOrFloat())
    return std::nullopt;
  int64_t bytes = type.getNumElements() *
                  std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  return ViewRange{view.getSource(), *shift, *shift + bytes};
}

/// True if running `generic` in independent chunks of its outer dimension
/// computes what it computes in one piece: no output is read through
/// another indexing map or overlaps another output.
bool chunksAreIndependent(linalg::GenericOp generic) {
  SmallVector<std::pair<ViewRange, AffineMap>> inputs, outputs;
  for (OpOperand &operand : generic->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()))
      continue; // a scalar operand
    std::optional<ViewRange> range = viewRange(operand.get());
    if (!range)
      return false;
    AffineMap map = generic.getMatchingIndexingMap(&operand);
    (generic.isDpsInit(&operand) ? outputs : inputs).push_back({*range, map});
  }
  for (auto [i, out] : llvm::enumerate(outputs)) {
    for (auto &other : llvm::drop_begin(outputs, i + 1))
      if (out.first.overlaps(other.first))
        return false;
    for (auto &in : inputs)
      if (out.first.overlaps(in.first) &&
          (in.first.begin != out.first.begin || in.first.end != out.first.end ||
           in.second != out.second))
        return false;
  }
  return true;
}

/// The side-effect free ops of `func`'s body that `generic` depends on, in
/// block order; fails if it depends on anything else than the arena and
/// parameter arguments and such ops.
FailureOr<SmallVector<Operation *>> dependencies(linalg::GenericOp generic,
                                                 func::FuncOp func) {
  llvm::SetVector<Value> values;
  values.insert(generic->operand_begin(), generic->operand_end());
  getUsedValuesDefinedAbove(generic.getRegion(), values);
  llvm::SetVector<Operation *> ops;
  for (size_t i = 0; i < values.size(); ++i) {
    Value v = values[i];
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() != &func.front() || arg.getArgNumber() > 1)
        return failure(); // only the arena and the parameters
      continue;
    }
    Operation *op = v.getDefiningOp();
    if (op->getBlock() != &func.front() || op->getNumRegions() != 0 ||
        !isMemoryEffectFree(op))
      return failure();
    if (ops.insert(op))
      values.insert(op->operand_begin(), op->operand_end());
  }
  SmallVector<Operation *> sorted(ops.begin(), ops.end());
  llvm::sort(sorted,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return sorted;
}

struct OutlineParallelLoopsPass
    : public gpipe::impl::OutlineParallelLoopsBase<OutlineParallelLoopsPass> {
  using OutlineParallelLoopsBase::OutlineParallelLoopsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    SmallVector<func::FuncOp> stageFunctions;
    for (auto func : module.getOps<func::FuncOp>())
      if ((func->hasAttr("gpipe.phase") || func->hasAttr("gpipe.stage_op")) &&
          !func.isExternal())
        stageFunctions.push_back(func);
    for (func::FuncOp func : stageFunctions)
      if (failed(outlineLoops(func, symbols)))
        return signalPassFailure();
  }

  LogicalResult outlineLoops(func::FuncOp func, SymbolTable &symbols) {
    if (func.getNumArguments() != 3 ||
        !isa<MemRefType>(func.getArgument(0).getType()) ||
        !isa<MemRefType>(func.getArgument(1).getType()))
      return func.emitOpError("is not a lowered stage function (arena, "
                              "params, ctx)");
    SmallVector<linalg::GenericOp> generics;
    for (auto generic : func.front().getOps<linalg::GenericOp>())
      generics.push_back(generic);
    // The bodies follow the stage function in loop order.
    Operation *last = func;
    for (linalg::GenericOp generic : generics) {
      if (!generic.hasPureBufferSemantics() ||
          generic.getNumReductionLoops() != 0)
        continue;
      SmallVector<int64_t> ranges = generic.getStaticLoopRanges();
      if (ranges.empty() || llvm::any_of(ranges, ShapedType::isDynamic))
        continue;
      int64_t total = 1;
      for (int64_t r : ranges)
        total *= r;
      auto split = llvm::find_if(ranges, [](int64_t r) { return r > 1; });
      if (total < minElements || split == ranges.end() ||
          !chunksAreIndependent(generic))
        continue;
      FailureOr<SmallVector<Operation *>> deps = dependencies(generic, func);
      if (failed(deps))
        continue;
      FailureOr<func::FuncOp> body = outline(
          func, generic, *deps, split - ranges.begin(), *split, symbols, last);
      if (failed(body))
        return failure();
      last = *body;
    }
    return success();
  }

  /// Moves `generic` into a body function placed after `after` and
  /// replaces it with a gpipe.parallel_for of that function.
  FailureOr<func::FuncOp> outline(func::FuncOp func, linalg::GenericOp generic,
                                  ArrayRef<Operation *> deps, unsigned dim,
                                  int64_t extent, SymbolTable &symbols,
                                  Operation *after) {
    MLIRContext *context = func.getContext();
    Location loc = generic.getLoc();
    OpBuilder b(context);
    Type indexType = b.getIndexType();
    auto type =
        b.getFunctionType({func.getArgument(0).getType(),
                           func.getArgument(1).getType(), indexType, indexType},
                          {});
    // <entry>_loop<k>, k counting the bodies already placed after the
    // entry (SymbolTable::insert renames it should the name be taken).
    int64_t k = 0;
    for (Operation *op = after; op != func; op = op->getPrevNode())
      ++k;
    auto body = func::FuncOp::create(
        loc, (func.getName() + "_loop" + Twine(k)).str(), type);
    body.setPrivate();
    for (unsigned i = 0; i < 2; ++i)
      body.setArgAttr(i, "llvm.noalias", UnitAttr::get(context));
    Block *block = body.addEntryBlock();
    IRMapping mapping;
    mapping.map(func.getArgument(0), block->getArgument(0));
    mapping.map(func.getArgument(1), block->getArgument(1));
    b.setInsertionPointToStart(block);
    for (Operation *op : deps)
      b.clone(*op, mapping);
    auto cloned = cast<linalg::GenericOp>(b.clone(*generic, mapping));
    b.create<func::ReturnOp>(loc);

    IRRewriter rewriter(context);
    rewriter.setInsertionPoint(cloned);
    FailureOr<linalg::LinalgLoops> loops =
        linalg::linalgOpToParallelLoops(rewriter, cloned);
    auto parallel = succeeded(loops) && !loops->empty()
                        ? dyn_cast<scf::ParallelOp>(loops->front())
                        : scf::ParallelOp();
    if (!parallel || parallel.getNumLoops() <= dim) {
      body.erase();
      return generic.emitOpError("did not give one parallel loop nest");
    }
    rewriter.eraseOp(cloned);
    parallel.getLowerBoundMutable()[dim].set(block->getArgument(2));
    parallel.getUpperBoundMutable()[dim].set(block->getArgument(3));

    StringAttr name = symbols.insert(body, std::next(Block::iterator(after)));
    b.setInsertionPoint(generic);
    b.create<ParallelForOp>(loc, FlatSymbolRefAttr::get(name),
                            func.getArgument(2), b.getI64IntegerAttr(extent));
    generic.erase();
    return body;
  }
};

} // namespace
