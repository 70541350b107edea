//===- TileTransposingLoops.cpp - Transposes in cache-sized blocks --------===//
//
// A parallel loop nest that writes along one dimension and reads along
// another (a transpose, or an element-wise op with a transposed operand)
// runs in blocks of both dimensions, so that every cache line it reads or
// writes is used whole while it is in the level-1 cache.
//
//===----------------------------------------------------------------------===//
#include "Transforms/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/IR/BuiltinTypes.h"

namespace gpipe {
#define GEN_PASS_DEF_TILETRANSPOSINGLOOPS
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;

namespace {

/// The position among `loop`'s induction variables of the one `index` is
/// (directly or through an affine.apply of one dimension), or -1.
int64_t inductionVariableOf(scf::ParallelOp loop, Value index) {
  if (auto apply = index.getDefiningOp<affine::AffineApplyOp>()) {
    AffineMap map = apply.getAffineMap();
    if (map.getNumResults() != 1 || map.getNumSymbols() != 0 ||
        map.getNumDims() != 1 || !isa<AffineDimExpr>(map.getResult(0)))
      return -1;
    index = apply.getMapOperands().front();
  }
  for (auto [i, iv] : llvm::enumerate(loop.getInductionVars()))
    if (iv == index)
      return static_cast<int64_t>(i);
  return -1;
}

/// True if `type`'s innermost dimension is contiguous.
bool innermostContiguous(MemRefType type) {
  if (type.getRank() == 0)
    return false;
  SmallVector<int64_t> strides;
  int64_t offset;
  return succeeded(getStridesAndOffset(type, strides, offset)) &&
         strides.back() == 1;
}

/// The larger of `bytes` and the size of `type`'s elements.
int64_t widerElement(int64_t bytes, MemRefType type) {
  return std::max<int64_t>(bytes, (type.getElementTypeBitWidth() + 7) / 8);
}

/// The loop (induction variable position) that runs along the innermost,
/// contiguous dimension of every buffer the stores of `loop`'s body write,
/// if they agree on one; -1 if they do not, -2 if there is none.
int64_t writtenLoop(scf::ParallelOp loop, int64_t &elementBytes) {
  int64_t found = -2;
  loop.getBody()->walk([&](memref::StoreOp store) {
    MemRefType type = store.getMemRefType();
    if (!innermostContiguous(type) || found == -1)
      return;
    int64_t i = inductionVariableOf(loop, store.getIndices().back());
    if (i < 0 || (found >= 0 && found != i)) {
      found = -1;
      return;
    }
    found = i;
    elementBytes = widerElement(elementBytes, type);
  });
  return found;
}

/// The loop the first load runs along its buffer's innermost dimension
/// by, when that is not `written`; -1 if none.
int64_t transposedRead(scf::ParallelOp loop, int64_t written,
                       int64_t &elementBytes) {
  int64_t found = -1;
  loop.getBody()->walk([&](memref::LoadOp load) {
    MemRefType type = load.getMemRefType();
    if (found >= 0 || !innermostContiguous(type))
      return;
    int64_t i = inductionVariableOf(loop, load.getIndices().back());
    if (i >= 0 && i != written) {
      found = i;
      elementBytes = widerElement(elementBytes, type);
    }
  });
  return found;
}

/// The constant trip count of `loop`'s dimension `i`, if it has one.
std::optional<int64_t> tripCount(scf::ParallelOp loop, int64_t i) {
  std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound()[i]),
                         upper = getConstantIntValue(loop.getUpperBound()[i]),
                         step = getConstantIntValue(loop.getStep()[i]);
  if (!lower || !upper || !step || *step <= 0)
    return std::nullopt;
  return (*upper - *lower + *step - 1) / *step;
}

struct TileTransposingLoopsPass
    : public gpipe::impl::TileTransposingLoopsBase<TileTransposingLoopsPass> {
  using TileTransposingLoopsBase::TileTransposingLoopsBase;

  void runOnOperation() override {
    SmallVector<scf::ParallelOp> loops;
    getOperation()->walk([&](scf::ParallelOp loop) {
      if (!loop->getParentOfType<scf::ParallelOp>())
        loops.push_back(loop);
    });
    for (scf::ParallelOp loop : loops)
      tile(loop);
  }

  void tile(scf::ParallelOp loop) {
    int64_t elementBytes = 1;
    int64_t written = writtenLoop(loop, elementBytes);
    if (written < 0)
      return;
    int64_t read = transposedRead(loop, written, elementBytes);
    if (read < 0)
      return;
    // A line's elements along the read dimension; along the written one
    // `rows` lines of the source (fewer than a level-1 cache's ways, as
    // rows of a power-of-two stride fall in one set).
    int64_t along = std::max<int64_t>(1, lineBytes / elementBytes);
    auto worthIt = [&](int64_t i, int64_t size) {
      std::optional<int64_t> trips = tripCount(loop, i);
      return !trips || *trips > size;
    };
    if (!worthIt(read, along) && !worthIt(written, rows))
      return; // the whole transpose is one block already
    SmallVector<int64_t> sizes(loop.getNumLoops(), 1);
    sizes[read] = along;
    sizes[written] = rows;
    scf::tileParallelLoop(loop, sizes, /*noMinMaxBounds=*/false);
  }
};

} // namespace
