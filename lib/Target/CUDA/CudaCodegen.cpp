//===- CudaCodegen.cpp - Stage modules to PTX and host code ---------------===//
#include "Target/CUDA/CudaCodegen.h"
#include "Transforms/Passes.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/SCFToGPU/SCFToGPUPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <numeric>

using namespace mlir;

namespace {

/// The name of the runtime's launch entry point.
constexpr llvm::StringLiteral kLaunch = "gpipe_cuda_launch";

void loadGpuDialects(MLIRContext *context) {
  DialectRegistry registry;
  registry.insert<gpu::GPUDialect, NVVM::NVVMDialect, scf::SCFDialect>();
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  context->appendDialectRegistry(registry);
  context->loadDialect<gpu::GPUDialect, NVVM::NVVMDialect, scf::SCFDialect>();
}

/// The CUDA toolkit whose libdevice (nvvm/libdevice/libdevice.10.bc)
/// holds the GPU's math functions: $CUDA_HOME, $CUDA_PATH, or
/// /usr/local/cuda; "" if none has it.
std::string cudaToolkitPath() {
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *dir = std::getenv(var))
      if (llvm::sys::fs::exists(std::string(dir) +
                                "/nvvm/libdevice/libdevice.10.bc"))
        return dir;
  if (llvm::sys::fs::exists("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc"))
    return "/usr/local/cuda";
  return "";
}

/// Whether `op` reads or writes memory on the host where it stands: device
/// memory must be touched by kernels only.
bool touchesMemory(Operation *op) {
  if (isa<memref::ViewOp, memref::SubViewOp, memref::ReinterpretCastOp,
          memref::CastOp, memref::CollapseShapeOp, memref::ExpandShapeOp,
          memref::ExtractAlignedPointerAsIndexOp>(op))
    return false;
  return isa<memref::LoadOp, memref::StoreOp, memref::CopyOp, memref::AllocOp,
             memref::AllocaOp, linalg::LinalgOp>(op);
}

/// The element-wise functions of a lowered stage (LowerStage marks them).
SmallVector<func::FuncOp> stageOpFunctions(ModuleOp module) {
  SmallVector<func::FuncOp> funcs;
  for (auto f : module.getOps<func::FuncOp>())
    if (!f.isExternal() && f->hasAttr("gpipe.stage_op"))
      funcs.push_back(f);
  return funcs;
}

/// The copies a phase's entry makes itself (an output that is an input, a
/// reshape, a constant from the parameters, a stash: LowerStage emits them
/// as memref.copy in the entry, between its kernel calls) move into
/// functions of their own, marked as LowerStage marks its element-wise
/// ones, so that they become kernels as those do. Each takes the entry's
/// arguments (arena, params, context) and recomputes its views.
LogicalResult outlineEntryCopies(ModuleOp module) {
  SmallVector<func::FuncOp> entries;
  for (auto f : module.getOps<func::FuncOp>())
    if (!f.isExternal() && !f->hasAttr("gpipe.stage_op"))
      entries.push_back(f);
  MLIRContext *context = module.getContext();
  OpBuilder b(context);
  for (func::FuncOp f : entries) {
    Operation *last = f; // the outlined functions follow f, in order
    SmallVector<memref::CopyOp> copies;
    f.walk([&](memref::CopyOp copy) { copies.push_back(copy); });
    for (auto [index, copy] : llvm::enumerate(copies)) {
      SetVector<Operation *> slice;
      BackwardSliceOptions options;
      getBackwardSlice(copy.getOperation(), &slice, options);
      // Views of the entry's arguments only (not of a loop's induction
      // variable or a value computed from memory).
      bool movable = llvm::all_of(slice, isMemoryEffectFree);
      SmallVector<Operation *> moved(slice.begin(), slice.end());
      moved.push_back(copy);
      for (Operation *op : moved)
        for (Value v : op->getOperands())
          if (auto arg = dyn_cast<BlockArgument>(v))
            movable &= arg.getOwner() == &f.getBody().front();
      if (!movable || copy->getParentOp() != f.getOperation())
        return copy.emitError("CUDA stage: a copy in the phase's entry "
                              "that cannot move into a kernel");
      b.setInsertionPointAfter(last);
      auto outlined = b.create<func::FuncOp>(
          copy.getLoc(), (f.getName() + "_copy" + Twine(index)).str(),
          f.getFunctionType());
      outlined.setPrivate();
      last = outlined;
      outlined->setAttr("gpipe.stage_op", b.getUnitAttr());
      outlined->setAttr("passthrough",
                        b.getArrayAttr({b.getStringAttr("noinline")}));
      Block *body = outlined.addEntryBlock();
      IRMapping map;
      map.map(f.getArguments(), outlined.getArguments());
      b.setInsertionPointToStart(body);
      for (Operation *op : slice)
        b.clone(*op, map);
      b.clone(*copy, map);
      b.create<func::ReturnOp>(copy.getLoc());
      b.setInsertionPoint(copy);
      b.create<func::CallOp>(copy.getLoc(), outlined, f.getArguments());
      copy.erase();
    }
  }
  return success();
}

/// Whether `op` or an op nested in it touches memory outside a parallel
/// loop.
bool touchesMemoryOutsideLoops(Operation *op) {
  if (isa<scf::ParallelOp>(op))
    return false;
  WalkResult found = op->walk<WalkOrder::PreOrder>([](Operation *inner) {
    if (isa<scf::ParallelOp>(inner))
      return WalkResult::skip();
    return touchesMemory(inner) ? WalkResult::interrupt()
                                : WalkResult::advance();
  });
  return found.wasInterrupted();
}

/// Host code that touches memory outside parallel loops (a 0-d op became
/// plain loads and stores; LowerStage's serial loops accumulate into rows
/// that indices may repeat) runs as one GPU thread: each run of such code
/// between the parallel loops is wrapped in a parallel loop of one
/// iteration. Address arithmetic (views, constants) stays on the host.
void wrapSerialCode(func::FuncOp f) {
  Block &body = f.getBody().front();
  // Address arithmetic first, so that it dominates every wrapped run.
  SmallVector<Operation *> addresses;
  for (Operation &op : body.without_terminator())
    if (isa<memref::ViewOp, arith::ConstantOp>(op))
      addresses.push_back(&op);
  for (Operation *op : llvm::reverse(addresses))
    op->moveBefore(&body.front());
  SmallVector<SmallVector<Operation *>> runs(1);
  for (Operation &op : body.without_terminator()) {
    if (isa<memref::ViewOp, arith::ConstantOp>(op))
      continue;
    if (isa<scf::ParallelOp>(op)) {
      runs.emplace_back();
      continue;
    }
    runs.back().push_back(&op);
  }
  OpBuilder b(f.getContext());
  for (ArrayRef<Operation *> run : runs) {
    if (llvm::none_of(run, touchesMemoryOutsideLoops))
      continue;
    // A value of the run used after it would leave the loop: then the
    // whole body is one thread.
    bool escapes = llvm::any_of(run, [&](Operation *op) {
      return llvm::any_of(op->getUsers(), [&](Operation *user) {
        return !llvm::is_contained(run, user) &&
               !llvm::any_of(run, [&](Operation *o) {
                 return o->isProperAncestor(user);
               });
      });
    });
    SmallVector<Operation *> moved(run.begin(), run.end());
    if (escapes) {
      moved.clear();
      for (Operation &op : body.without_terminator())
        if (!isa<memref::ViewOp, arith::ConstantOp>(op))
          moved.push_back(&op);
    }
    Location loc = moved.front()->getLoc();
    b.setInsertionPoint(moved.front());
    Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
    Value one = b.create<arith::ConstantIndexOp>(loc, 1);
    auto loop = b.create<scf::ParallelOp>(loc, ValueRange{zero},
                                          ValueRange{one}, ValueRange{one});
    Operation *yield = loop.getBody()->getTerminator();
    for (Operation *op : moved)
      op->moveBefore(yield);
    if (escapes)
      return;
  }
}

/// `shift` as `base + iv * stride` with constant base and stride (the byte
/// shift of a row in gpipe-lower-stage's row copies), if it is that.
std::optional<std::pair<int64_t, int64_t>> linearIn(Value shift, Value iv) {
  auto add = shift.getDefiningOp<arith::AddIOp>();
  if (!add)
    return std::nullopt;
  for (auto [constant, product] : {std::pair(add.getLhs(), add.getRhs()),
                                   std::pair(add.getRhs(), add.getLhs())}) {
    std::optional<int64_t> base = getConstantIntValue(constant);
    auto mul = product.getDefiningOp<arith::MulIOp>();
    if (!base || !mul)
      continue;
    for (auto [index, factor] : {std::pair(mul.getLhs(), mul.getRhs()),
                                 std::pair(mul.getRhs(), mul.getLhs())})
      if (index == iv)
        if (std::optional<int64_t> stride = getConstantIntValue(factor))
          return std::pair(*base, *stride);
  }
  return std::nullopt;
}

/// A loop of row copies (gpipe-lower-stage marks it: every row goes to a
/// place of its own) becomes one copy of a [rows, length] strided view, so
/// that it is one kernel rather than a launch per row. Loops of another
/// shape stay (a launch per iteration: correct, slow).
void copyRowsAtOnce(func::FuncOp f) {
  SmallVector<scf::ForOp> loops;
  f.walk([&](scf::ForOp loop) {
    if (loop->hasAttr(gpipe::kIndependentRowsAttr))
      loops.push_back(loop);
  });
  for (scf::ForOp loop : loops) {
    std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound()),
                           ub = getConstantIntValue(loop.getUpperBound()),
                           step = getConstantIntValue(loop.getStep());
    auto copies = llvm::to_vector(loop.getBody()->getOps<linalg::CopyOp>());
    if (!lb || !ub || !step || *lb != 0 || *step != 1 || *ub < 1 ||
        copies.size() != 1)
      continue;
    linalg::CopyOp copy = copies.front();
    auto from = copy.getInputs()[0].getDefiningOp<memref::ViewOp>();
    auto to = copy.getOutputs()[0].getDefiningOp<memref::ViewOp>();
    if (!from || !to)
      continue;
    auto type = cast<MemRefType>(from.getType());
    if (type != to.getType() || type.getRank() != 1 ||
        !type.getLayout().isIdentity() || !type.hasStaticShape())
      continue;
    Value iv = loop.getInductionVar();
    auto fromRow = linearIn(from.getByteShift(), iv);
    auto toRow = linearIn(to.getByteShift(), iv);
    int64_t bytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    int64_t rows = *ub, length = type.getDimSize(0);
    // Rows at whole elements, written rows apart from each other.
    if (!fromRow || !toRow || fromRow->second % bytes ||
        toRow->second % bytes || toRow->second / bytes < length ||
        fromRow->second < 0)
      continue;
    OpBuilder b(loop);
    Location loc = loop.getLoc();
    auto strided = [&](memref::ViewOp row, std::pair<int64_t, int64_t> at) {
      int64_t stride = at.second / bytes;
      Value first = b.create<memref::ViewOp>(
          loc,
          MemRefType::get({(rows - 1) * stride + length},
                          type.getElementType()),
          row.getSource(), b.create<arith::ConstantIndexOp>(loc, at.first),
          ValueRange{});
      auto layout = StridedLayoutAttr::get(b.getContext(), 0, {stride, 1});
      return b
          .create<memref::ReinterpretCastOp>(
              loc,
              MemRefType::get({rows, length}, type.getElementType(), layout),
              first, 0, ArrayRef<int64_t>{rows, length},
              ArrayRef<int64_t>{stride, 1})
          .getResult();
    };
    Value source = strided(from, *fromRow), target = strided(to, *toRow);
    b.create<linalg::CopyOp>(loc, source, target);
    loop.erase();
  }
}

/// A reduction's parallel dimensions outermost, its reduced ones inside
/// (in their order): the parallel ones become threads and each thread sums
/// its own elements in the order the op gives, where a reduced dimension
/// first would launch a kernel per reduced index from the host.
LogicalResult reduceInsideThreads(func::FuncOp f) {
  SmallVector<linalg::GenericOp> reductions;
  f.walk([&](linalg::GenericOp op) {
    if (op.getNumReductionLoops() > 0)
      reductions.push_back(op);
  });
  IRRewriter rewriter(f.getContext());
  for (linalg::GenericOp op : reductions) {
    SmallVector<unsigned> order;
    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    for (auto [i, kind] : llvm::enumerate(iterators))
      if (kind == utils::IteratorType::parallel)
        order.push_back(i);
    for (auto [i, kind] : llvm::enumerate(iterators))
      if (kind != utils::IteratorType::parallel)
        order.push_back(i);
    if (llvm::is_sorted(order))
      continue;
    rewriter.setInsertionPoint(op);
    if (failed(linalg::interchangeGenericOp(rewriter, op, order)))
      return op.emitError("CUDA stage: cannot reorder a reduction's loops");
  }
  return success();
}

/// Whether `op` or an op nested in it writes memory.
bool writesMemory(Operation *op) {
  WalkResult found = op->walk([](Operation *inner) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(inner);
    if (effects ? effects.hasEffect<MemoryEffects::Write>()
                : !inner->hasTrait<OpTrait::HasRecursiveMemoryEffects>() &&
                      !isa<scf::YieldOp>(inner))
      return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return found.wasInterrupted();
}

/// A sequential loop that reads an element, updates it and writes it back
/// at every iteration (a reduced dimension inside a thread: linalg's
/// loops accumulate in the output) keeps the element in a register: loaded
/// before the loop, carried through it, stored after. The sums are the same
/// to the bit; what goes is a round trip through memory per iteration,
/// which serializes the loop's loads (they might alias the store). The
/// loop must write nothing else, and read the element nowhere else (an
/// op's output never shares memory with its inputs: LowerStage's plan).
void accumulateInRegisters(func::FuncOp f) {
  SmallVector<scf::ForOp> loops;
  f.walk([&](scf::ForOp loop) { loops.push_back(loop); }); // inner first
  for (scf::ForOp loop : loops) {
    if (loop.getNumResults() != 0)
      continue;
    Block *body = loop.getBody();
    SmallVector<memref::StoreOp> stores;
    bool other = false;
    for (Operation &op : body->without_terminator()) {
      if (auto s = dyn_cast<memref::StoreOp>(op))
        stores.push_back(s);
      else if (!isa<memref::LoadOp>(op))
        other |= writesMemory(&op);
    }
    if (other || stores.size() != 1)
      continue;
    memref::StoreOp store = stores.front();
    Value element = store.getMemRef();
    if (!loop.isDefinedOutsideOfLoop(element) ||
        !llvm::all_of(store.getIndices(),
                      [&](Value v) { return loop.isDefinedOutsideOfLoop(v); }))
      continue;
    // One load of the element, before the store, and no other read of it.
    SmallVector<memref::LoadOp> reads;
    loop.walk([&](memref::LoadOp l) {
      if (l.getMemRef() == element)
        reads.push_back(l);
    });
    if (reads.size() != 1 || reads.front()->getBlock() != body ||
        reads.front().getIndices() != store.getIndices() ||
        !reads.front()->isBeforeInBlock(store))
      continue;
    memref::LoadOp load = reads.front();
    OpBuilder b(loop);
    Value initial =
        b.create<memref::LoadOp>(load.getLoc(), element, load.getIndices());
    auto carried = b.create<scf::ForOp>(loop.getLoc(), loop.getLowerBound(),
                                        loop.getUpperBound(), loop.getStep(),
                                        ValueRange{initial});
    Block *newBody = carried.getBody();
    IRMapping map;
    map.map(loop.getInductionVar(), carried.getInductionVar());
    map.map(load.getResult(), carried.getRegionIterArgs().front());
    b.setInsertionPointToStart(newBody);
    Value last;
    for (Operation &op : body->without_terminator()) {
      if (&op == load.getOperation())
        continue;
      if (&op == store.getOperation()) {
        last = map.lookupOrDefault(store.getValueToStore());
        continue;
      }
      b.clone(op, map);
    }
    // The loop yields the new value (scf.for's builder leaves a loop with
    // carried values without a terminator).
    if (!newBody->empty() && isa<scf::YieldOp>(newBody->back()))
      newBody->back().erase();
    b.setInsertionPointToEnd(newBody);
    b.create<scf::YieldOp>(loop.getLoc(), last);
    b.setInsertionPointAfter(carried);
    b.create<memref::StoreOp>(store.getLoc(), carried.getResult(0), element,
                              store.getIndices());
    loop.erase();
  }
}

/// One top-level parallel loop as a 1-D loop tiled by the block size: its
/// tiles map to blocks, the iterations of a tile to threads.
void collapseAndTile(scf::ParallelOp loop) {
  IRRewriter rewriter(loop.getContext());
  if (loop.getNumLoops() > 1) {
    std::vector<unsigned> all(loop.getNumLoops());
    std::iota(all.begin(), all.end(), 0);
    rewriter.setInsertionPoint(loop);
    scf::ParallelOp collapsed;
    // collapseParallelLoops replaces the loop; find the new one after it.
    Operation *before = loop->getPrevNode();
    Block *block = loop->getBlock();
    collapseParallelLoops(rewriter, loop, {all});
    Operation *first = before ? before->getNextNode() : &block->front();
    for (Operation *op = first; op; op = op->getNextNode())
      if ((collapsed = dyn_cast<scf::ParallelOp>(op)))
        break;
    if (!collapsed)
      return;
    loop = collapsed;
  }
  scf::tileParallelLoop(loop, {gpipe::kCudaThreadsPerBlock},
                        /*noMinMaxBounds=*/false);
}

/// The aligned pointer of a memref, as the bare-pointer convention passes
/// it to a kernel (which applies the layout's own offset). Taken from the
/// root buffer plus the byte shifts of the `memref.view`s on the way:
/// upstream folds `extract_aligned_pointer_as_index` of any view-like op
/// into that of its source, which is right for subviews, casts and
/// reshapes (same aligned pointer) but drops a `memref.view`'s shift, and
/// every arena tensor is such a view.
Value alignedPointer(OpBuilder &b, Location loc, Value memref) {
  SmallVector<Value> shifts;
  while (Operation *def = memref.getDefiningOp()) {
    auto view = dyn_cast<ViewLikeOpInterface>(def);
    if (!view)
      break;
    if (auto shifted = dyn_cast<memref::ViewOp>(def))
      shifts.push_back(shifted.getByteShift());
    memref = view.getViewSource();
  }
  Value pointer = b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, memref);
  for (Value shift : shifts)
    pointer = b.create<arith::AddIOp>(loc, pointer, shift);
  return pointer;
}

/// gpu.launch_func on the host becomes a call of the runtime's launcher:
///   gpipe_cuda_launch(context, kernel, gridX, gridY, gridZ, blockX,
///                     blockY, blockZ, arguments, count)
/// all int64: `arguments` is the address of a stack array holding every
/// kernel argument widened to 64 bits (device pointers of the memrefs,
/// bare-pointer convention; integers; floats by their bits).
LogicalResult replaceLaunches(ModuleOp module,
                              const llvm::StringMap<int64_t> &kernelIndex) {
  MLIRContext *ctx = module.getContext();
  OpBuilder b(ctx);
  Type i64 = b.getI64Type();
  auto launchType = b.getFunctionType(SmallVector<Type>(10, i64), {});
  if (!module.lookupSymbol(kLaunch)) {
    b.setInsertionPointToEnd(module.getBody());
    auto decl = b.create<func::FuncOp>(module.getLoc(), kLaunch, launchType);
    decl.setPrivate();
  }
  WalkResult walk = module.walk([&](gpu::LaunchFuncOp launch) {
    Location loc = launch.getLoc();
    auto func = launch->getParentOfType<func::FuncOp>();
    // Stage functions take (arena, params, context).
    if (!func || func.getNumArguments() != 3 ||
        !func.getArgument(2).getType().isInteger(64)) {
      launch.emitError("a GPU kernel launched outside a stage function");
      return WalkResult::interrupt();
    }
    Value context = func.getArgument(2);
    b.setInsertionPoint(launch);
    auto toI64 = [&](Value v) -> Value {
      Type t = v.getType();
      if (t.isIndex())
        return b.create<arith::IndexCastOp>(loc, i64, v);
      if (t.isInteger(64))
        return v;
      if (auto it = dyn_cast<IntegerType>(t))
        return b.create<arith::ExtUIOp>(loc, i64, v);
      if (t.isF32())
        return b.create<arith::ExtUIOp>(
            loc, i64, b.create<arith::BitcastOp>(loc, b.getI32Type(), v));
      if (t.isF64())
        return b.create<arith::BitcastOp>(loc, i64, v);
      if (isa<MemRefType>(t))
        return b.create<arith::IndexCastOp>(loc, i64,
                                            alignedPointer(b, loc, v));
      return Value();
    };
    ValueRange operands = launch.getKernelOperands();
    auto argsType = MemRefType::get(
        {std::max<int64_t>(1, static_cast<int64_t>(operands.size()))}, i64);
    Value args = b.create<memref::AllocaOp>(loc, argsType);
    for (auto [i, operand] : llvm::enumerate(operands)) {
      Value wide = toI64(operand);
      if (!wide) {
        launch.emitError("a GPU kernel argument of type ")
            << operand.getType() << " (no way to pass it yet)";
        return WalkResult::interrupt();
      }
      Value at = b.create<arith::ConstantIndexOp>(loc, i);
      b.create<memref::StoreOp>(loc, wide, args, ValueRange{at});
    }
    auto it = kernelIndex.find(launch.getKernelName().getValue());
    if (it == kernelIndex.end()) {
      launch.emitError("a launch of an unknown kernel");
      return WalkResult::interrupt();
    }
    gpu::KernelDim3 grid = launch.getGridSizeOperandValues();
    gpu::KernelDim3 block = launch.getBlockSizeOperandValues();
    SmallVector<Value> callArgs = {
        context,
        b.create<arith::ConstantIntOp>(loc, it->second, 64),
        toI64(grid.x),
        toI64(grid.y),
        toI64(grid.z),
        toI64(block.x),
        toI64(block.y),
        toI64(block.z),
        toI64(args),
        b.create<arith::ConstantIntOp>(loc, operands.size(), 64)};
    b.create<func::CallOp>(loc, kLaunch, TypeRange{}, callArgs);
    launch.erase();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

} // namespace

LogicalResult gpipe::outlineCudaKernels(ModuleOp module, llvm::StringRef arch,
                                        CudaDeviceCode &code) {
  MLIRContext *context = module.getContext();
  loadGpuDialects(context);
  code.arch = arch.str();
  code.ptx.clear();
  code.kernels.clear();

  if (failed(outlineEntryCopies(module)))
    return failure();
  // Copies (LowerStage's row copies, in host loops) as linalg copies, so
  // that they become kernels too.
  for (func::FuncOp f : stageOpFunctions(module)) {
    SmallVector<memref::CopyOp> copies;
    f.walk([&](memref::CopyOp copy) { copies.push_back(copy); });
    for (memref::CopyOp copy : copies) {
      OpBuilder b(copy);
      b.create<linalg::CopyOp>(copy.getLoc(), copy.getSource(),
                               copy.getTarget());
      copy.erase();
    }
    copyRowsAtOnce(f);
    if (failed(reduceInsideThreads(f)))
      return failure();
  }
  // Element-wise ops to parallel loops; straight-line code into a loop of
  // one iteration.
  {
    PassManager pm(context);
    pm.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
    if (failed(pm.run(module)))
      return failure();
  }
  SmallVector<func::FuncOp> funcs = stageOpFunctions(module);
  for (func::FuncOp f : funcs) {
    accumulateInRegisters(f);
    // Loops over no elements (an op on a tensor with a zero dimension, as
    // a Slice past the end gives) launch nothing.
    SmallVector<scf::ParallelOp> empty;
    f.walk([&](scf::ParallelOp loop) {
      if (loop.getNumResults() != 0)
        return;
      for (auto [lb, ub] :
           llvm::zip(loop.getLowerBound(), loop.getUpperBound())) {
        std::optional<int64_t> l = getConstantIntValue(lb),
                               u = getConstantIntValue(ub);
        if (l && u && *u <= *l) {
          empty.push_back(loop);
          return;
        }
      }
    });
    for (scf::ParallelOp loop : empty)
      loop.erase();
    wrapSerialCode(f);
    // Every outermost parallel loop, also those in host loops (a loop of
    // row copies launches a kernel per row).
    SmallVector<scf::ParallelOp> loops;
    f.walk<WalkOrder::PreOrder>([&](scf::ParallelOp loop) {
      loops.push_back(loop);
      return WalkResult::skip();
    });
    for (scf::ParallelOp loop : loops)
      collapseAndTile(loop);
    // Constant tile steps and bounds (folding only: a loop of one tile
    // must stay, its tile being the block), for the mapping to see the
    // block size.
    if (failed(applyPatternsAndFoldGreedily(f, RewritePatternSet(context))))
      return failure();
  }

  // Parallel loops to GPU launches (tiles -> blocks, iterations ->
  // threads, deeper loops sequential in a thread), outlined as kernels.
  {
    PassManager pm(context);
    pm.addNestedPass<func::FuncOp>(createGpuMapParallelLoopsPass());
    pm.addPass(createParallelLoopToGpuPass());
    pm.addPass(createLowerAffinePass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createGpuKernelOutliningPass());
    if (failed(pm.run(module)))
      return failure();
  }
  // Nothing may touch device memory on the host, in any function.
  for (func::FuncOp f : module.getOps<func::FuncOp>()) {
    WalkResult host = f.walk([&](Operation *op) {
      if (!touchesMemory(op))
        return WalkResult::advance();
      op->emitError("CUDA stage: this op would run on the host and read "
                    "device memory (not mapped to a GPU kernel)");
      return WalkResult::interrupt();
    });
    if (host.wasInterrupted())
      return failure();
  }

  // Every kernel in one GPU module, so that the stage has one PTX file.
  SmallVector<gpu::GPUModuleOp> gpuModules(module.getOps<gpu::GPUModuleOp>());
  if (gpuModules.empty())
    return success(); // a stage of library kernels only
  OpBuilder b(context);
  b.setInsertionPoint(gpuModules.front());
  auto kernels =
      b.create<gpu::GPUModuleOp>(module.getLoc(), "gpipe_cuda_kernels");
  llvm::StringMap<int64_t> kernelIndex;
  for (gpu::GPUModuleOp m : gpuModules) {
    // Outlining makes one module per launch, named uniquely, each with
    // one kernel named after the launching function (the same for two
    // launches of one function): the kernel takes its module's name.
    auto funcs = llvm::to_vector(m.getOps<gpu::GPUFuncOp>());
    if (funcs.size() != 1)
      return m.emitError("CUDA stage: expected one kernel per outlined "
                         "module");
    gpu::GPUFuncOp f = funcs.front();
    StringAttr name = m.getNameAttr();
    f.setName(name);
    kernelIndex[name] = static_cast<int64_t>(code.kernels.size());
    code.kernels.push_back(name.str());
    f->moveBefore(&kernels.getBody()->back());
    module.walk([&](gpu::LaunchFuncOp launch) {
      if (launch.getKernelModuleName() == name)
        launch.setKernelAttr(SymbolRefAttr::get(
            kernels.getNameAttr(), {FlatSymbolRefAttr::get(name)}));
    });
    m.erase();
  }

  // The kernels to PTX with LLVM's NVPTX backend (libdevice from the CUDA
  // toolkit for math functions).
  {
    PassManager pm(context);
    GpuNVVMAttachTargetOptions target;
    target.chip = arch.str();
    target.features = "+ptx80";
    target.optLevel = 3;
    pm.addPass(createGpuNVVMAttachTarget(target));
    ConvertGpuOpsToNVVMOpsOptions nvvm;
    nvvm.useBarePtrCallConv = true;
    nvvm.indexBitwidth = 64;
    OpPassManager &device = pm.nest<gpu::GPUModuleOp>();
    device.addPass(createConvertSCFToCFPass());
    device.addPass(createConvertGpuOpsToNVVMOps(nvvm));
    device.addPass(createCanonicalizerPass());
    device.addPass(createReconcileUnrealizedCastsPass());
    GpuModuleToBinaryPassOptions binary;
    binary.compilationTarget = "isa";
    binary.toolkitPath = cudaToolkitPath();
    pm.addPass(createGpuModuleToBinaryPass(binary));
    if (failed(pm.run(module)))
      return failure();
  }
  for (auto binary :
       llvm::make_early_inc_range(module.getOps<gpu::BinaryOp>())) {
    for (Attribute a : binary.getObjects())
      if (auto object = dyn_cast<gpu::ObjectAttr>(a))
        // The serializer ends the text with a NUL (for cuModuleLoadData);
        // the file holds the text.
        code.ptx += object.getObject().getValue().rtrim('\0').str();
    binary.erase();
  }
  if (code.ptx.empty())
    return module.emitError("CUDA stage: NVPTX produced no PTX");

  if (failed(replaceLaunches(module, kernelIndex)))
    return failure();
  module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
  return success();
}

std::string gpipe::findPtxas() {
  if (auto found = llvm::sys::findProgramByName("ptxas"))
    return *found;
  if (auto found =
          llvm::sys::findProgramByName("ptxas", {"/usr/local/cuda/bin"}))
    return *found;
  return "";
}

bool gpipe::assemblePtx(llvm::StringRef ptx, llvm::StringRef arch,
                        llvm::StringRef ptxas, std::string &cubin,
                        std::string &error) {
  llvm::SmallString<128> in, out, log;
  if (llvm::sys::fs::createTemporaryFile("gpipe-stage", "ptx", in) ||
      llvm::sys::fs::createTemporaryFile("gpipe-stage", "cubin", out) ||
      llvm::sys::fs::createTemporaryFile("gpipe-ptxas", "log", log)) {
    error = "cannot create temporary files";
    return false;
  }
  llvm::FileRemover removeIn(in), removeOut(out), removeLog(log);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(in, ec);
    if (ec) {
      error = ec.message();
      return false;
    }
    os << ptx;
  }
  std::string gpu = "--gpu-name=" + arch.str();
  llvm::StringRef args[] = {ptxas, gpu, "-O3", in, "-o", out};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log.str(),
                                                log.str()};
  int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects);
  if (rc != 0) {
    auto text = llvm::MemoryBuffer::getFile(log);
    error = "ptxas failed (exit " + std::to_string(rc) + ")" +
            (text ? ": " + (*text)->getBuffer().trim().str() : "");
    return false;
  }
  auto bytes = llvm::MemoryBuffer::getFile(out, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!bytes) {
    error = "ptxas wrote no cubin";
    return false;
  }
  cubin = (*bytes)->getBuffer().str();
  return true;
}
