//===- LowerStage.cpp - Memory plan and native stage function -------------===//
//
// Rewrites @forward (nn heavy ops, linalg.generic on tensors, reshapes,
// parameters) into a function over one arena and one parameter blob:
//
//   func.func @gpipe_stage0_forward(%arena: memref<Axi8>,
//                                   %params: memref<Pxi8>, %ctx: i64)
//
// Tensors become memref.view of the arena at planned offsets; linalg.generic
// ops are re-created on those views; heavy ops become kernel table entries
// run by the runtime through `func.call @gpipe_kernel(%ctx, %id)`.
//
//===----------------------------------------------------------------------===//
#include "Transforms/MemoryPlan.h"
#include "Transforms/Passes.h"
#include "Transforms/StashPrecision.h"

#include "Analysis/CostModel.h"
#include "gpipe/common/KernelKind.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNDialect.h"
#include "NN/IR/NNOps.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace gpipe {
#define GEN_PASS_DEF_LOWERSTAGE
#include "Transforms/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

constexpr int64_t kAlignment = 64;

int64_t alignUp(int64_t v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

int64_t byteSize(RankedTensorType type) {
  int64_t bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, bits / 8);
}

/// Heavy ops run by the runtime's kernels: the nn ops of the kernel
/// contract (common/KernelKind.cpp); dropout only when it draws.
bool isKernelOp(Operation *op) {
  if (!isa<nn::NNDialect>(op->getDialect()))
    return false;
  if (auto dropout = dyn_cast<nn::DropoutOp>(op))
    return dropout.isRandom();
  return findKernelKind(op->getName().stripDialect().str()) != nullptr;
}

/// Where a tensor lives: a buffer class in the arena, or the parameters.
struct Location_ {
  bool inParams = false;
  int64_t paramOffset = 0;
  int cls = -1; // arena buffer class
};

/// A reduction over leading axes [0, p) and trailing axes [q, rank) of
/// `shape` (p <= q, the axes between kept) whose trailing run of E =
/// shape[q] x ... elements is at least kMinRun: the input as [A, K, E] (A
/// the leading axes' product, K the kept ones'). A convolution's bias
/// gradient (axes 0, 2, 3 of NCHW), sums over a row's last axes and over
/// every axis are such. The linalg form keeps its accumulator in memory (out[k]
/// += x, one dependent add an element: 0.12 ms for the bias gradient of 8
/// channels of 32 x 28 x 28, one core); a run summed in a register with
/// reassociation allowed is vectorized by LLVM, the order fixed by the bundle's
/// code.
std::optional<std::array<int64_t, 3>>
trailingReductionRuns(ArrayRef<int64_t> shape, ArrayRef<int64_t> axes) {
  constexpr int64_t kMinRun = 16;
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t p = 0, q = rank;
  while (p < rank && llvm::is_contained(axes, p))
    ++p;
  // Every axis: one run of all the elements (a loss's mean).
  if (p == rank)
    p = q = 0;
  while (q > p && llvm::is_contained(axes, q - 1))
    --q;
  if (q == rank || static_cast<int64_t>(axes.size()) != p + rank - q)
    return std::nullopt;
  std::array<int64_t, 3> runs{1, 1, 1};
  for (int64_t i = 0; i < rank; ++i)
    runs[i < p ? 0 : i < q ? 1 : 2] *= shape[i];
  if (runs[2] < kMinRun)
    return std::nullopt;
  return runs;
}

class StageLowering {
public:
  StageLowering(ModuleOp module, func::FuncOp forward, StringRef entry)
      : module(module), forward(forward), entry(entry),
        builder(module.getContext()) {}

  LogicalResult run();

private:
  LogicalResult placeParameters();
  LogicalResult assignBuffers();
  /// A training stage's forward and backward in one arena (see the
  /// definition); `last` is the position of the function's return.
  void shareForwardArena(int64_t last);
  /// The parameter offset `result` can be computed in place of (an
  /// optimizer update), if any.
  std::optional<int64_t>
  inPlaceUpdate(Value result, const DenseMap<Operation *, int64_t> &position);
  LogicalResult emit();
  Value viewOf(OpBuilder &b, Value tensor);
  /// The buffer of `tensor` viewed with another static shape of the same
  /// number of elements (row-major, contiguous).
  Value viewOf(OpBuilder &b, Value tensor, ArrayRef<int64_t> shape);
  /// For each o < outer: copy elements [o * fromRow + fromAt, + length) of
  /// `from` to [o * toRow + toAt, + length) of `to` (contiguous runs:
  /// memcpy).
  void copyRuns(OpBuilder &b, Location loc, Value from, int64_t fromRow,
                int64_t fromAt, Value to, int64_t toRow, int64_t toAt,
                int64_t outer, int64_t length);
  /// out[k] += sum over a < A, e < E of in[a, k, e] for the input viewed
  /// as [A, K, E] (`runs`), each run of E summed in a register (see
  /// trailingReductionRuns).
  void emitTrailingRunSums(OpBuilder &b, Location loc, Value input,
                           Value output, std::array<int64_t, 3> runs);
  DictionaryAttr describe(Value tensor);
  LogicalResult emitKernel(OpBuilder &b, Operation *op);
  /// Data movement and reductions as linalg on memref views; failure if
  /// `op` is not one of them.
  FailureOr<bool> emitDataMovement(OpBuilder &b, Operation *op);

  ModuleOp module;
  func::FuncOp forward;
  StringRef entry;
  Builder builder;

  llvm::StringMap<int64_t> paramOffsets;
  int64_t paramsSize = 0;
  DenseMap<Value, Location_> where;
  std::vector<BufferRequest> classes;
  MemoryPlan plan;
  /// Results that must be copied into their own output buffer.
  SmallVector<std::pair<Value, int>> outputCopies;
  SmallVector<int> outputClasses;
  /// Whether the function's plan is the lowered forward's arena's too.
  bool arenaOfForward = false;

  func::FuncOp stage;
  Value arena, params, ctx;
  SmallVector<Attribute> kernels;
  /// The id of each kernel op's entry in `kernels`.
  DenseMap<Operation *, int64_t> kernelIds;
  /// The op functions of generated loops, by id: what --profile-ops and
  /// traces time through gpipe_loop().
  SmallVector<Attribute> loops;
};

LogicalResult StageLowering::placeParameters() {
  // Constants become non-trainable parameters: one read-only blob. A stage
  // with several phases is lowered one function at a time; parameters placed
  // by an earlier phase keep their offsets, new ones go after them.
  int counter = 0;
  Operation *lastParam = nullptr;
  std::string stagePrefix;
  auto stageIndex = module->getAttrOfType<IntegerAttr>("gpipe.stage_index");
  auto numStages = module->getAttrOfType<IntegerAttr>("gpipe.num_stages");
  if (stageIndex && numStages && numStages.getInt() > 1)
    stagePrefix = "s" + std::to_string(stageIndex.getInt()) + "_";
  for (auto param : module.getOps<ParameterOp>()) {
    lastParam = param;
    if (param.getConstant())
      ++counter;
  }
  SmallVector<nn::ConstantOp> constants;
  forward.walk([&](nn::ConstantOp c) { constants.push_back(c); });
  OpBuilder moduleBuilder(module.getBodyRegion());
  if (lastParam)
    moduleBuilder.setInsertionPointAfter(lastParam);
  else
    moduleBuilder.setInsertionPointToStart(module.getBody());
  for (nn::ConstantOp c : constants) {
    // Every tensor of a bundle has its own name: constants of a pipeline
    // stage are named after it.
    std::string name = "__constant_" + stagePrefix + std::to_string(counter++);
    auto param = moduleBuilder.create<ParameterOp>(
        c.getLoc(), name, c.getValue(), /*trainable=*/false,
        /*optimizer_state=*/false, /*constant=*/true);
    OpBuilder b(c);
    auto get = b.create<GetParameterOp>(
        c.getLoc(), c.getType(),
        FlatSymbolRefAttr::get(param.getSymNameAttr()));
    c.replaceAllUsesWith(get.getResult());
    c.erase();
  }
  for (auto param : module.getOps<ParameterOp>())
    if (auto placed = param->getAttrOfType<IntegerAttr>("gpipe.offset"))
      paramsSize = std::max(
          paramsSize, alignUp(placed.getInt() + byteSize(param.getType())));
  for (auto param : module.getOps<ParameterOp>()) {
    if (!param->hasAttr("gpipe.offset")) {
      param->setAttr("gpipe.offset", builder.getI64IntegerAttr(paramsSize));
      paramsSize = alignUp(paramsSize + byteSize(param.getType()));
    }
    paramOffsets[param.getSymName()] =
        param->getAttrOfType<IntegerAttr>("gpipe.offset").getInt();
  }
  return success();
}

std::optional<int64_t>
StageLowering::inPlaceUpdate(Value result,
                             const DenseMap<Operation *, int64_t> &position) {
  // A new parameter value computed element-wise is written straight into
  // the parameter, when nothing reads the old value after it is computed.
  auto generic = result.getDefiningOp<linalg::GenericOp>();
  if (!generic || result.getType() != generic.getResultTypes().front() ||
      !llvm::all_of(generic.getIndexingMapsArray(),
                    [](AffineMap m) { return m.isProjectedPermutation(); }) ||
      !generic.getIndexingMapsArray().back().isIdentity())
    return std::nullopt;
  for (Operation *user : result.getUsers()) {
    auto assign = dyn_cast<AssignParameterOp>(user);
    if (!assign || assign.getValue().getType() != result.getType())
      continue;
    int64_t at = position.lookup(generic);
    bool oldReadLater = false;
    forward.walk([&](GetParameterOp get) {
      if (get.getName() != assign.getName())
        return;
      for (Operation *reader : get.getResult().getUsers())
        oldReadLater |=
            reader != generic.getOperation() && position.lookup(reader) >= at;
    });
    if (!oldReadLater)
      return paramOffsets.lookup(assign.getName());
  }
  return std::nullopt;
}

LogicalResult StageLowering::assignBuffers() {
  Block &body = forward.front();
  DenseMap<Operation *, int64_t> position;
  int64_t step = 0;
  for (Operation &op : body)
    position[&op] = step++;
  int64_t last = step;

  auto newClass = [&](Value v, int64_t begin) {
    classes.push_back(
        {byteSize(cast<RankedTensorType>(v.getType())), begin, begin});
    Location_ loc;
    loc.cls = classes.size() - 1;
    where[v] = loc;
  };
  for (BlockArgument arg : body.getArguments())
    newClass(arg, -1);
  for (Operation &op : body) {
    if (auto get = dyn_cast<GetParameterOp>(op)) {
      Location_ loc;
      loc.inParams = true;
      loc.paramOffset = paramOffsets.lookup(get.getName());
      where[get.getResult()] = loc;
    } else if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
      where[reshape.getResult()] = where.lookup(reshape.getInput());
    } else if (isa<tensor::EmptyOp>(op)) {
      for (OpOperand &use : op.getResult(0).getUses())
        if (!isa<linalg::GenericOp>(use.getOwner()))
          return op.emitError("tensor.empty used outside linalg.generic outs");
    } else if (isa<func::ReturnOp>(op)) {
      // Returned values are read at the end (copied or kept in place).
      for (Value operand : op.getOperands()) {
        auto it = where.find(operand);
        if (it != where.end() && !it->second.inParams)
          classes[it->second.cls].end = last;
      }
      continue;
    } else if (isa<arith::ConstantOp>(op) &&
               !isa<ShapedType>(op.getResult(0).getType())) {
      continue; // scalars used inside linalg bodies: cloned, no buffer
    } else {
      for (Value result : op.getResults()) {
        if (std::optional<int64_t> offset = inPlaceUpdate(result, position)) {
          Location_ loc;
          loc.inParams = true;
          loc.paramOffset = *offset;
          where[result] = loc;
          continue;
        }
        newClass(result, position[&op]);
      }
    }
    // Uses extend the live range of the operand's class.
    for (Value operand : op.getOperands()) {
      auto it = where.find(operand);
      if (it == where.end() || it->second.inParams)
        continue;
      BufferRequest &r = classes[it->second.cls];
      r.end = std::max(r.end, position[&op]);
    }
  }
  // Outputs live to the end, each in a buffer of its own.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  DenseSet<int> seen;
  for (Value v : ret.getOperands()) {
    Location_ loc = where.lookup(v);
    bool isInput = !loc.inParams && classes[loc.cls].begin < 0;
    if (loc.inParams || isInput || !seen.insert(loc.cls).second) {
      classes.push_back(
          {byteSize(cast<RankedTensorType>(v.getType())), last, last});
      outputCopies.emplace_back(v, classes.size() - 1);
      outputClasses.push_back(classes.size() - 1);
      continue;
    }
    classes[loc.cls].end = last;
    outputClasses.push_back(loc.cls);
  }
  // Inputs are written before the step starts: live from the beginning.
  for (BlockArgument arg : body.getArguments())
    classes[where[arg].cls].begin = -1;
  shareForwardArena(last);
  plan = planMemory(classes, kAlignment);
  return success();
}

void StageLowering::shareForwardArena(int64_t last) {
  // A training stage's forward and backward share one arena (the runtime
  // reads gpipe.arena_of): what the backward reads of the forward's values
  // stays where the forward left it, and a micro-batch whose backward runs
  // next after its forward is never copied (StreamOp::
  // directlyCarriedMicroBatches). The forward keeps a received input the
  // backward reads (recompute's stage input) intact to its end; the
  // backward plans those values and the forward's kept outputs at the
  // forward's offsets. Data inputs are read again from the batch.
  Block &body = forward.front();
  auto isCarried = [](Role role) {
    return role == Role::Activation || role == Role::Stash;
  };
  if (forward.getSymName() == "forward") {
    auto backward = module.lookupSymbol<func::FuncOp>("backward");
    if (!backward)
      return;
    llvm::StringSet<> read;
    for (unsigned i = 0; i < backward.getNumArguments(); ++i)
      read.insert(nameOf(backward.getArgAttrDict(i)));
    for (BlockArgument arg : body.getArguments())
      if (argRole(forward, arg.getArgNumber()) == Role::Activation &&
          read.contains(nameOf(forward.getArgAttrDict(arg.getArgNumber()))))
        classes[where[arg].cls].end = last;
    return;
  }
  if (forward.getSymName() != "backward")
    return;
  // The lowered forward: its inputs' and outputs' names and offsets.
  llvm::StringMap<int64_t> offsets;
  for (auto f : module.getOps<func::FuncOp>()) {
    auto phase = f->getAttrOfType<StringAttr>("gpipe.phase");
    if (!phase || phase.getValue() != "forward")
      continue;
    for (StringRef key : {"gpipe.inputs", "gpipe.outputs"})
      if (auto slots = f->getAttrOfType<ArrayAttr>(key))
        for (auto slot : slots.getAsRange<DictionaryAttr>()) {
          auto role = slot.getAs<RoleAttr>("role");
          if (role && isCarried(role.getValue()))
            offsets[slot.getAs<StringAttr>("name").getValue()] =
                slot.getAs<IntegerAttr>("offset").getInt();
        }
  }
  if (offsets.empty())
    return;
  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto it = offsets.find(nameOf(forward.getArgAttrDict(i)));
    if (it != offsets.end() && isCarried(argRole(forward, i)))
      classes[where[arg].cls].fixedOffset = it->second;
  }
  arenaOfForward = true;
}

/// A memref of `type`'s shape at byte `offset` of `base` (arena or params).
static Value viewAt(OpBuilder &b, Location loc, Value base, int64_t offset,
                    Type type) {
  auto t = cast<RankedTensorType>(type);
  Value shift = b.create<arith::ConstantIndexOp>(loc, offset);
  return b.create<memref::ViewOp>(
      loc, MemRefType::get(t.getShape(), t.getElementType()), base, shift,
      ValueRange{});
}

Value StageLowering::viewOf(OpBuilder &b, Value tensor) {
  Location_ loc = where.lookup(tensor);
  return viewAt(b, tensor.getLoc(), loc.inParams ? params : arena,
                loc.inParams ? loc.paramOffset : plan.offsets[loc.cls],
                tensor.getType());
}

Value StageLowering::viewOf(OpBuilder &b, Value tensor,
                            ArrayRef<int64_t> shape) {
  Location_ loc = where.lookup(tensor);
  auto type = cast<RankedTensorType>(tensor.getType());
  return viewAt(b, tensor.getLoc(), loc.inParams ? params : arena,
                loc.inParams ? loc.paramOffset : plan.offsets[loc.cls],
                RankedTensorType::get(shape, type.getElementType()));
}

void StageLowering::copyRuns(OpBuilder &b, Location loc, Value from,
                             int64_t fromRow, int64_t fromAt, Value to,
                             int64_t toRow, int64_t toAt, int64_t outer,
                             int64_t length) {
  auto run = [&](OpBuilder &nb, Location l, Value tensor, Value row,
                 int64_t rowElements, int64_t at) {
    auto type = cast<RankedTensorType>(tensor.getType());
    Location_ place = where.lookup(tensor);
    int64_t bytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    int64_t base = place.inParams ? place.paramOffset : plan.offsets[place.cls];
    Value shift = nb.create<arith::AddIOp>(
        l, nb.create<arith::ConstantIndexOp>(l, base + at * bytes),
        nb.create<arith::MulIOp>(
            l, row, nb.create<arith::ConstantIndexOp>(l, rowElements * bytes)));
    return nb.create<memref::ViewOp>(
        l, MemRefType::get({length}, type.getElementType()),
        place.inParams ? params : arena, shift, ValueRange{});
  };
  auto body = [&](OpBuilder &nb, Location l, Value o) {
    nb.create<memref::CopyOp>(l, run(nb, l, from, o, fromRow, fromAt),
                              run(nb, l, to, o, toRow, toAt));
  };
  if (outer == 1) {
    body(b, loc, b.create<arith::ConstantIndexOp>(loc, 0));
    return;
  }
  auto loop = b.create<scf::ForOp>(
      loc, b.create<arith::ConstantIndexOp>(loc, 0),
      b.create<arith::ConstantIndexOp>(loc, outer),
      b.create<arith::ConstantIndexOp>(loc, 1), ValueRange{},
      [&](OpBuilder &nb, Location l, Value o, ValueRange) {
        body(nb, l, o);
        nb.create<scf::YieldOp>(l);
      });
  // Each row goes to a place of its own: a GPU target copies all rows in
  // one kernel (CudaCodegen).
  loop->setAttr(kIndependentRowsAttr, b.getUnitAttr());
}

void StageLowering::emitTrailingRunSums(OpBuilder &b, Location loc, Value input,
                                        Value output,
                                        std::array<int64_t, 3> runs) {
  auto [outer, kept, run] = runs;
  Value in = viewOf(b, input, {outer, kept, run});
  Value out = viewOf(b, output, {kept});
  Type element = cast<RankedTensorType>(input.getType()).getElementType();
  auto index = [&](OpBuilder &nb, int64_t v) -> Value {
    return nb.create<arith::ConstantIndexOp>(loc, v);
  };
  auto loop =
      [&](OpBuilder &nb, int64_t n, ValueRange init,
          function_ref<ValueRange(OpBuilder &, Value, ValueRange)> body) {
        return nb.create<scf::ForOp>(
            loc, index(nb, 0), index(nb, n), index(nb, 1), init,
            [&](OpBuilder &lb, Location l, Value i, ValueRange carried) {
              lb.create<scf::YieldOp>(l, body(lb, i, carried));
            });
      };
  auto reassoc = arith::FastMathFlagsAttr::get(b.getContext(),
                                               arith::FastMathFlags::reassoc);
  loop(b, outer, {}, [&](OpBuilder &ab, Value a, ValueRange) {
    loop(ab, kept, {}, [&](OpBuilder &kb, Value k, ValueRange) {
      Value zero =
          kb.create<arith::ConstantOp>(loc, element, kb.getZeroAttr(element));
      auto sum = loop(
          kb, run, {zero},
          [&](OpBuilder &eb, Value e, ValueRange acc) -> ValueRange {
            Value x = eb.create<memref::LoadOp>(loc, in, ValueRange{a, k, e});
            Value next = eb.create<arith::AddFOp>(loc, acc[0], x, reassoc);
            return next.getDefiningOp()->getResults();
          });
      Value old = kb.create<memref::LoadOp>(loc, out, ValueRange{k});
      Value total = kb.create<arith::AddFOp>(loc, old, sum.getResult(0));
      kb.create<memref::StoreOp>(loc, total, out, ValueRange{k});
      return ValueRange{};
    });
    return ValueRange{};
  });
}

DictionaryAttr StageLowering::describe(Value tensor) {
  auto type = cast<RankedTensorType>(tensor.getType());
  Location_ loc = where.lookup(tensor);
  std::string dtype;
  llvm::raw_string_ostream os(dtype);
  os << type.getElementType();
  return builder.getDictionaryAttr({
      builder.getNamedAttr(
          "space", builder.getStringAttr(loc.inParams ? "params" : "arena")),
      builder.getNamedAttr("offset", builder.getI64IntegerAttr(
                                         loc.inParams ? loc.paramOffset
                                                      : plan.offsets[loc.cls])),
      builder.getNamedAttr("shape", builder.getI64ArrayAttr(type.getShape())),
      builder.getNamedAttr("dtype", builder.getStringAttr(os.str())),
  });
}

LogicalResult StageLowering::emitKernel(OpBuilder &b, Operation *op) {
  // The runtime's oneDNN kernels compute in float32.
  SmallVector<Type> types(op->getOperandTypes());
  llvm::append_range(types, op->getResultTypes());
  bool hasLabels =
      isa<nn::SoftmaxCrossEntropyOp, nn::SoftmaxCrossEntropyGradOp>(op);
  for (Type t : types)
    if (!cast<RankedTensorType>(t).getElementType().isF32() &&
        !(hasLabels &&
          cast<RankedTensorType>(t).getElementType().isInteger(64)))
      return op->emitError("'")
             << op->getName() << "' on " << t
             << " is not supported by code generation yet (float32 only)";

  if (auto ln = dyn_cast<nn::LayerNormOp>(op)) {
    auto input = cast<RankedTensorType>(ln.getInput().getType());
    int64_t inner = 1;
    for (int64_t d : input.getShape().drop_front(ln.getAxis()))
      inner *= d;
    for (Value v : op->getOperands().drop_front())
      if (cast<RankedTensorType>(v.getType()).getNumElements() != inner)
        return op->emitError("'nn.layer_norm' with broadcast scale or bias is "
                             "not supported by code generation yet");
  }
  // The runtime reads operands and attributes by the contract's names.
  // Attributes left at their defaults are written out too.
  NamedAttrList attrList(op->getAttrDictionary());
  op->getName().populateDefaultAttrs(attrList);
  DictionaryAttr attributes = attrList.getDictionary(op->getContext());
  std::string wrong = checkKernelEntry(
      *findKernelKind(op->getName().stripDialect().str()), op->getNumOperands(),
      op->getNumResults(), [&](std::string_view name) {
        return static_cast<bool>(
            attributes.get(StringRef(name.data(), name.size())));
      });
  if (!wrong.empty())
    return op->emitError("'")
           << op->getName()
           << "' does not match the kernel contract (common/KernelKind.cpp): "
           << wrong;
  SmallVector<Attribute> operands, results;
  for (Value v : op->getOperands())
    operands.push_back(describe(v));
  for (Value v : op->getResults())
    results.push_back(describe(v));
  int64_t id = kernels.size();
  kernelIds[op] = id;
  kernels.push_back(builder.getDictionaryAttr({
      builder.getNamedAttr("id", builder.getI64IntegerAttr(id)),
      builder.getNamedAttr("kind",
                           builder.getStringAttr(op->getName().stripDialect())),
      // The ONNX node it comes from (gradients keep their forward op's
      // location): what gpipe-run --profile-ops reports times for.
      builder.getNamedAttr("op", builder.getStringAttr(costTableKey(op))),
      builder.getNamedAttr("attributes", attributes),
      builder.getNamedAttr("operands", builder.getArrayAttr(operands)),
      builder.getNamedAttr("results", builder.getArrayAttr(results)),
  }));
  Value idValue =
      b.create<arith::ConstantOp>(op->getLoc(), b.getI64IntegerAttr(id));
  b.create<func::CallOp>(op->getLoc(), "gpipe_kernel", TypeRange{},
                         ValueRange{ctx, idValue});
  return success();
}

namespace {

SmallVector<utils::IteratorType> parallel(int64_t rank) {
  return SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel);
}

/// out = in, element by element, through an indexing map for `in`.
void copyWithMap(OpBuilder &b, Location loc, Value in, Value out,
                 AffineMap inMap) {
  int64_t rank = cast<MemRefType>(out.getType()).getRank();
  b.create<linalg::GenericOp>(
      loc, TypeRange{}, ValueRange{in}, ValueRange{out},
      ArrayRef<AffineMap>{inMap, b.getMultiDimIdentityMap(rank)},
      parallel(rank), [](OpBuilder &nb, Location l, ValueRange args) {
        nb.create<linalg::YieldOp>(l, args[0]);
      });
}

/// A static subview of `source` at `offsets` with `sizes`, unit strides.
Value subview(OpBuilder &b, Location loc, Value source,
              ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> strides(sizes.size(), 1);
  return b.create<memref::SubViewOp>(loc, source, offsets, sizes, strides);
}

/// Serial loops over every index of `shape`, outermost first.
void serialLoopNest(
    OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
    function_ref<void(OpBuilder &, Location, ValueRange)> body) {
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
  Value one = b.create<arith::ConstantIndexOp>(loc, 1);
  SmallVector<Value> lbs(shape.size(), zero), steps(shape.size(), one), ubs;
  for (int64_t d : shape)
    ubs.push_back(b.create<arith::ConstantIndexOp>(loc, d));
  scf::buildLoopNest(b, loc, lbs, ubs, steps, body);
}

int64_t product(ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

Value zeroOf(OpBuilder &b, Location loc, Type type) {
  return b.create<arith::ConstantOp>(loc, b.getZeroAttr(type));
}

/// The gather index of element `ivs` of a gather's output (or of its
/// gradient): indices[ivs[axis .. axis + rank(indices))] as an index,
/// negative values counted from the end of the data's dimension `dim`.
Value gatherIndex(OpBuilder &b, Location loc, Value indices, ValueRange ivs,
                  int64_t axis, int64_t indexRank, Value dim) {
  SmallVector<Value> where(ivs.begin() + axis, ivs.begin() + axis + indexRank);
  Value raw = b.create<memref::LoadOp>(loc, indices, where);
  Value i = b.create<arith::IndexCastOp>(loc, b.getIndexType(), raw);
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0);
  Value negative =
      b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, i, zero);
  return b.create<arith::SelectOp>(loc, negative,
                                   b.create<arith::AddIOp>(loc, i, dim), i);
}

/// `ivs` with the gathered positions replaced by the data index `i`.
SmallVector<Value> dataIndex(ValueRange ivs, int64_t axis, int64_t indexRank,
                             Value i) {
  SmallVector<Value> at(ivs.begin(), ivs.begin() + axis);
  at.push_back(i);
  at.append(ivs.begin() + axis + indexRank, ivs.end());
  return at;
}

} // namespace

FailureOr<bool> StageLowering::emitDataMovement(OpBuilder &b, Operation *op) {
  Location loc = op->getLoc();
  MLIRContext *context = op->getContext();
  auto fail = [&](const Twine &why) -> FailureOr<bool> {
    return op->emitError("'") << op->getName() << "' " << why;
  };
  return llvm::TypeSwitch<Operation *, FailureOr<bool>>(op)
      .Case([&](nn::TransposeOp t) -> FailureOr<bool> {
        ArrayRef<int64_t> perm = t.getPerm();
        SmallVector<AffineExpr> exprs(perm.size());
        for (auto [i, p] : llvm::enumerate(perm))
          exprs[p] = getAffineDimExpr(i, context);
        copyWithMap(b, loc, viewOf(b, t.getInput()), viewOf(b, t.getResult()),
                    AffineMap::get(perm.size(), 0, exprs, context));
        return true;
      })
      .Case([&](nn::SliceOp s) -> FailureOr<bool> {
        // Axes with positive steps: a strided subview; axes with negative
        // steps: an affine index start - i * |step| into it.
        auto inType = cast<RankedTensorType>(s.getInput().getType());
        auto outType = cast<RankedTensorType>(s.getResult().getType());
        int64_t rank = inType.getRank();
        // One axis cut with step 1 (the others whole): contiguous runs.
        SmallVector<int64_t> cut;
        for (int64_t i = 0; i < rank; ++i)
          if (inType.getDimSize(i) != outType.getDimSize(i) ||
              s.getSteps()[i] != 1)
            cut.push_back(i);
        if (cut.size() == 1 && s.getSteps()[cut[0]] == 1 &&
            outType.getNumElements() > 0) {
          int64_t a = cut[0];
          int64_t inner = product(inType.getShape().drop_front(a + 1));
          int64_t outer = product(inType.getShape().take_front(a));
          int64_t inRow = inType.getDimSize(a) * inner;
          int64_t outRow = outType.getDimSize(a) * inner;
          copyRuns(b, loc, s.getInput(), inRow, s.getStarts()[a] * inner,
                   s.getResult(), outRow, 0, outer, outRow);
          return true;
        }
        SmallVector<int64_t> offsets, sizes, strides;
        SmallVector<AffineExpr> exprs;
        for (int64_t i = 0; i < rank; ++i) {
          int64_t start = s.getStarts()[i], step = s.getSteps()[i];
          if (step > 0) {
            offsets.push_back(outType.getDimSize(i) ? start : 0);
            sizes.push_back(outType.getDimSize(i));
            strides.push_back(step);
            exprs.push_back(getAffineDimExpr(i, context));
          } else {
            offsets.push_back(0);
            sizes.push_back(inType.getDimSize(i));
            strides.push_back(1);
            exprs.push_back(getAffineConstantExpr(start, context) -
                            getAffineDimExpr(i, context) * (-step));
          }
        }
        Value window = b.create<memref::SubViewOp>(loc, viewOf(b, s.getInput()),
                                                   offsets, sizes, strides);
        copyWithMap(b, loc, window, viewOf(b, s.getResult()),
                    AffineMap::get(rank, 0, exprs, context));
        return true;
      })
      .Case([&](nn::ConcatOp c) -> FailureOr<bool> {
        // Row-major, each input is `outer` runs of `inner` elements that go
        // to columns [at, at + inner) of the output's rows: memcpy per run.
        auto outType = cast<RankedTensorType>(c.getResult().getType());
        int64_t axis = c.getAxis();
        int64_t outer = product(outType.getShape().take_front(axis));
        int64_t total = product(outType.getShape().drop_front(axis));
        int64_t at = 0;
        for (Value in : c.getInputs()) {
          auto inType = cast<RankedTensorType>(in.getType());
          int64_t inner = product(inType.getShape().drop_front(axis));
          if (inner)
            copyRuns(b, loc, in, inner, 0, c.getResult(), total, at, outer,
                     inner);
          at += inner;
        }
        return true;
      })
      .Case([&](nn::SplitOp sp) -> FailureOr<bool> {
        auto inType = cast<RankedTensorType>(sp.getInput().getType());
        int64_t axis = sp.getAxis();
        int64_t outer = product(inType.getShape().take_front(axis));
        int64_t total = product(inType.getShape().drop_front(axis));
        int64_t at = 0;
        for (Value result : sp.getResults()) {
          auto type = cast<RankedTensorType>(result.getType());
          int64_t inner = product(type.getShape().drop_front(axis));
          if (inner)
            copyRuns(b, loc, sp.getInput(), total, at, result, inner, 0, outer,
                     inner);
          at += inner;
        }
        return true;
      })
      .Case<nn::ReduceMeanOp, nn::ReduceSumOp>([&](auto r) -> FailureOr<bool> {
        bool mean = isa<nn::ReduceMeanOp>(r.getOperation());
        auto inType = cast<RankedTensorType>(r.getInput().getType());
        Type element = inType.getElementType();
        if (!isa<FloatType>(element))
          return fail("on " + std::string("non-float tensors is not supported "
                                          "by code generation yet"));
        Value in = viewOf(b, r.getInput()), out = viewOf(b, r.getResult());
        int64_t rank = inType.getRank(), count = 1;
        SmallVector<utils::IteratorType> iterators;
        SmallVector<AffineExpr> outExprs;
        for (int64_t i = 0; i < rank; ++i) {
          bool reduced = llvm::is_contained(r.getAxes(), i);
          iterators.push_back(reduced ? utils::IteratorType::reduction
                                      : utils::IteratorType::parallel);
          if (reduced)
            count *= inType.getDimSize(i);
          if (!reduced)
            outExprs.push_back(getAffineDimExpr(i, context));
          else if (r.getKeepdims())
            outExprs.push_back(getAffineConstantExpr(0, context));
        }
        b.create<linalg::FillOp>(loc, ValueRange{zeroOf(b, loc, element)},
                                 ValueRange{out});
        if (std::optional<std::array<int64_t, 3>> runs =
                trailingReductionRuns(inType.getShape(), r.getAxes())) {
          emitTrailingRunSums(b, loc, r.getInput(), r.getResult(), *runs);
        } else {
          b.create<linalg::GenericOp>(
              loc, TypeRange{}, ValueRange{in}, ValueRange{out},
              ArrayRef<AffineMap>{b.getMultiDimIdentityMap(rank),
                                  AffineMap::get(rank, 0, outExprs, context)},
              iterators, [](OpBuilder &nb, Location l, ValueRange args) {
                nb.create<linalg::YieldOp>(
                    l,
                    nb.create<arith::AddFOp>(l, args[1], args[0]).getResult());
              });
        }
        if (!mean)
          return true;
        int64_t outRank = cast<MemRefType>(out.getType()).getRank();
        Value scale = b.create<arith::ConstantOp>(
            loc, b.getFloatAttr(element, 1.0 / std::max<int64_t>(count, 1)));
        b.create<linalg::GenericOp>(
            loc, TypeRange{}, ValueRange{}, ValueRange{out},
            ArrayRef<AffineMap>{b.getMultiDimIdentityMap(outRank)},
            parallel(outRank), [&](OpBuilder &nb, Location l, ValueRange args) {
              nb.create<linalg::YieldOp>(
                  l, nb.create<arith::MulFOp>(l, args[0], scale).getResult());
            });
        return true;
      })
      .Case([&](nn::PadOp p) -> FailureOr<bool> {
        if (p.getMode() != "constant")
          return fail("with mode '" + p.getMode().str() +
                      "' is not supported by code generation yet");
        ArrayRef<int64_t> pads = p.getPads();
        if (llvm::any_of(pads, [](int64_t v) { return v < 0; }))
          return fail("with negative pads is not supported by code "
                      "generation yet");
        auto inType = cast<RankedTensorType>(p.getInput().getType());
        Type element = inType.getElementType();
        Value out = viewOf(b, p.getResult());
        Attribute fillAttr =
            isa<FloatType>(element)
                ? Attribute(
                      b.getFloatAttr(element, p.getValue().convertToDouble()))
                : Attribute(b.getIntegerAttr(
                      element,
                      static_cast<int64_t>(p.getValue().convertToDouble())));
        Value fill =
            b.create<arith::ConstantOp>(loc, cast<TypedAttr>(fillAttr));
        b.create<linalg::FillOp>(loc, ValueRange{fill}, ValueRange{out});
        copyWithMap(b, loc, viewOf(b, p.getInput()),
                    subview(b, loc, out, pads.take_front(inType.getRank()),
                            inType.getShape()),
                    b.getMultiDimIdentityMap(inType.getRank()));
        return true;
      })
      .Case([&](nn::GatherOp g) -> FailureOr<bool> {
        auto dataType = cast<RankedTensorType>(g.getData().getType());
        auto indicesType = cast<RankedTensorType>(g.getIndices().getType());
        Value data = viewOf(b, g.getData()),
              indices = viewOf(b, g.getIndices()),
              out = viewOf(b, g.getResult());
        int64_t axis = g.getAxis(),
                outRank = cast<MemRefType>(out.getType()).getRank();
        int64_t indexRank = indicesType.getRank(),
                dim = dataType.getDimSize(axis);
        b.create<linalg::GenericOp>(
            loc, TypeRange{}, ValueRange{}, ValueRange{out},
            ArrayRef<AffineMap>{b.getMultiDimIdentityMap(outRank)},
            parallel(outRank), [&](OpBuilder &nb, Location l, ValueRange) {
              SmallVector<Value> idx;
              for (int64_t i = 0; i < outRank; ++i)
                idx.push_back(nb.create<linalg::IndexOp>(l, i));
              Value size = nb.create<arith::ConstantIndexOp>(l, dim);
              Value i = gatherIndex(nb, l, indices, idx, axis, indexRank, size);
              Value v = nb.create<memref::LoadOp>(
                  l, data, dataIndex(idx, axis, indexRank, i));
              nb.create<linalg::YieldOp>(l, v);
            });
        return true;
      })
      .Case([&](nn::CumSumOp c) -> FailureOr<bool> {
        // A serial loop nest (the sum runs along the axis); step j of the
        // axis visits position p = j (or size - 1 - j in reverse):
        // out[p] = out[p - 1] + in[p], or out[p - 1] + in[p - 1] when
        // exclusive, with zero before the first position ("p - 1" is the
        // previous position visited).
        auto type = cast<RankedTensorType>(c.getInput().getType());
        Type element = type.getElementType();
        bool isFloat = isa<FloatType>(element);
        if (!isFloat && !isa<IntegerType>(element))
          return fail("on " + std::string("this element type is not "
                                          "supported by code generation"));
        int64_t rank = type.getRank();
        int64_t axis = c.getAxis() < 0 ? c.getAxis() + rank : c.getAxis();
        int64_t size = type.getDimSize(axis);
        bool reverse = c.getReverse(), exclusive = c.getExclusive();
        Value in = viewOf(b, c.getInput()), out = viewOf(b, c.getResult());
        Value one = b.create<arith::ConstantIndexOp>(loc, 1);
        serialLoopNest(
            b, loc, type.getShape(),
            [&](OpBuilder &nb, Location l, ValueRange ivs) {
              Value j = ivs[axis];
              Value last = nb.create<arith::ConstantIndexOp>(l, size - 1);
              auto position = [&](Value step) -> Value {
                return reverse
                           ? nb.create<arith::SubIOp>(l, last, step).getResult()
                           : step;
              };
              SmallVector<Value> at(ivs.begin(), ivs.end());
              at[axis] = position(j);
              Value z = zeroOf(nb, l, element);
              Value first = nb.create<arith::CmpIOp>(
                  l, arith::CmpIPredicate::eq, j,
                  nb.create<arith::ConstantIndexOp>(l, 0));
              // The previous position, clamped to 0 at the first step (its
              // value is then not used).
              Value prevStep = nb.create<arith::SelectOp>(
                  l, first, j, nb.create<arith::SubIOp>(l, j, one));
              SmallVector<Value> prevAt(ivs.begin(), ivs.end());
              prevAt[axis] = position(prevStep);
              Value prevSum = nb.create<arith::SelectOp>(
                  l, first, z, nb.create<memref::LoadOp>(l, out, prevAt));
              Value term =
                  exclusive ? nb.create<arith::SelectOp>(
                                    l, first, z,
                                    nb.create<memref::LoadOp>(l, in, prevAt))
                                  .getResult()
                            : nb.create<memref::LoadOp>(l, in, at).getResult();
              Value sum =
                  isFloat
                      ? nb.create<arith::AddFOp>(l, prevSum, term).getResult()
                      : nb.create<arith::AddIOp>(l, prevSum, term).getResult();
              nb.create<memref::StoreOp>(l, sum, out, at);
            });
        return true;
      })
      .Case([&](nn::GatherGradOp g) -> FailureOr<bool> {
        // Serial loops over the gradient (indices may repeat, so the adds
        // into one row must not race): out[pre, idx[mid], post] +=
        // grad[pre, mid, post]; an index outside the data adds nothing.
        auto gradType = cast<RankedTensorType>(g.getGradOutput().getType());
        auto dataType = cast<RankedTensorType>(g.getGradData().getType());
        auto indicesType = cast<RankedTensorType>(g.getIndices().getType());
        Type element = dataType.getElementType();
        Value grad = viewOf(b, g.getGradOutput()),
              indices = viewOf(b, g.getIndices()),
              out = viewOf(b, g.getGradData());
        int64_t axis = g.getAxis(), indexRank = indicesType.getRank(),
                dim = dataType.getDimSize(axis);
        b.create<linalg::FillOp>(loc, ValueRange{zeroOf(b, loc, element)},
                                 ValueRange{out});
        serialLoopNest(
            b, loc, gradType.getShape(),
            [&](OpBuilder &nb, Location l, ValueRange ivs) {
              Value size = nb.create<arith::ConstantIndexOp>(l, dim);
              Value z = nb.create<arith::ConstantIndexOp>(l, 0);
              Value i = gatherIndex(nb, l, indices, ivs, axis, indexRank, size);
              Value inside = nb.create<arith::AndIOp>(
                  l,
                  nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::sge, i, z),
                  nb.create<arith::CmpIOp>(l, arith::CmpIPredicate::slt, i,
                                           size));
              auto guard = nb.create<scf::IfOp>(l, inside);
              OpBuilder tb = guard.getThenBodyBuilder();
              SmallVector<Value> at = dataIndex(ivs, axis, indexRank, i);
              Value g = tb.create<memref::LoadOp>(l, grad, ivs);
              Value acc = tb.create<memref::LoadOp>(l, out, at);
              Value sum = tb.create<arith::AddFOp>(l, acc, g);
              tb.create<memref::StoreOp>(l, sum, out, at);
            });
        return true;
      })
      .Default([](Operation *) -> FailureOr<bool> { return false; });
}

LogicalResult StageLowering::emit() {
  MLIRContext *context = module.getContext();
  OpBuilder b(context);
  b.setInsertionPoint(forward);
  // The kept values the stash may hold in bfloat16 (StashPrecision.h),
  // while the phase's ops are those of the model: the inputs of the phase
  // the wiring lays the stash out by (a split backward's weight part reads
  // it as its input part does).
  SmallVector<bool> keptBf16;
  bool readsStash = forward.getSymName() == "backward" ||
                    forward.getSymName() == "backward_input";
  for (unsigned i = 0; i < forward.getNumArguments(); ++i)
    keptBf16.push_back(readsStash && keptInBf16(forward, i));
  // The activations that may come from the stage before in bfloat16
  // (receivedInBf16), while the backward phases are still the model's.
  SmallVector<bool> receivedBf16;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i)
    receivedBf16.push_back(forward.getSymName() == "forward" &&
                           receivedInBf16(forward, i));
  auto arenaType =
      MemRefType::get({std::max<int64_t>(plan.size, 1)}, b.getI8Type());
  auto paramsType =
      MemRefType::get({std::max<int64_t>(paramsSize, 1)}, b.getI8Type());
  stage = b.create<func::FuncOp>(
      forward.getLoc(), entry,
      b.getFunctionType({arenaType, paramsType, b.getI64Type()}, {}));
  if (!module.lookupSymbol("gpipe_kernel")) {
    auto decl = b.create<func::FuncOp>(
        forward.getLoc(), "gpipe_kernel",
        b.getFunctionType({b.getI64Type(), b.getI64Type()}, {}));
    decl.setPrivate();
  }
  if (!module.lookupSymbol("gpipe_loop")) {
    auto decl = b.create<func::FuncOp>(
        forward.getLoc(), "gpipe_loop",
        b.getFunctionType({b.getI64Type(), b.getI64Type(), b.getI64Type()},
                          {}));
    decl.setPrivate();
  }
  Block *block = stage.addEntryBlock();
  arena = block->getArgument(0);
  params = block->getArgument(1);
  ctx = block->getArgument(2);
  b.setInsertionPointToStart(block);

  // Each op's loops go into a function of their own, called in order by
  // the stage function and never inlined into it: LLVM's analyses grow
  // faster than linearly with a function's blocks, and a stage of a few
  // hundred ops in one function took minutes to compile.
  Value stageArena = arena, stageParams = params, stageCtx = ctx;
  Operation *lastOp = stage;
  int64_t opCount = 0;
  func::FuncOp opFunction;
  auto beginOp = [&](Location loc) {
    OpBuilder mb(context);
    mb.setInsertionPointAfter(lastOp);
    opFunction = mb.create<func::FuncOp>(
        loc, (entry + "_op" + Twine(opCount)).str(), stage.getFunctionType());
    opFunction.setPrivate();
    opFunction->setAttr("passthrough",
                        mb.getArrayAttr({mb.getStringAttr("noinline")}));
    opFunction->setAttr("gpipe.stage_op", mb.getUnitAttr());
    Block *body = opFunction.addEntryBlock();
    arena = body->getArgument(0);
    params = body->getArgument(1);
    ctx = body->getArgument(2);
    return OpBuilder::atBlockBegin(body);
  };
  auto endOp = [&](OpBuilder &b, OpBuilder &ob, bool keep) {
    arena = stageArena;
    params = stageParams;
    ctx = stageCtx;
    if (!keep) {
      opFunction.erase();
      return;
    }
    ob.create<func::ReturnOp>(opFunction.getLoc());
    // Each call between gpipe_loop(ctx, id, 0) and (ctx, id, 1), which
    // time it while the runtime profiles or traces.
    Location loc = opFunction.getLoc();
    int64_t id = loops.size();
    loops.push_back(builder.getDictionaryAttr({
        builder.getNamedAttr("id", builder.getI64IntegerAttr(id)),
        builder.getNamedAttr("op", builder.getStringAttr(costTableKey(loc))),
    }));
    Value idValue = b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(id));
    auto mark = [&](int64_t end) {
      b.create<func::CallOp>(loc, "gpipe_loop", TypeRange{},
                             ValueRange{ctx, idValue,
                                        b.create<arith::ConstantOp>(
                                            loc, b.getI64IntegerAttr(end))});
    };
    mark(0);
    b.create<func::CallOp>(loc, opFunction, ValueRange{arena, params, ctx});
    mark(1);
    lastOp = opFunction;
    ++opCount;
  };

  for (Operation &op : forward.front()) {
    // Scalar constants are defined again in the op functions that read
    // them (below); reshapes alias their input.
    if (isa<GetParameterOp, nn::ReshapeOp, tensor::EmptyOp>(op) ||
        (isa<arith::ConstantOp>(op) &&
         !isa<ShapedType>(op.getResult(0).getType())))
      continue;
    if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
      for (OpOperand &out : generic.getDpsInitsMutable())
        if (generic.payloadUsesValueFromOperand(&out))
          return generic.emitOpError("reads its outputs; only element-wise "
                                     "generics are supported");
      OpBuilder ob = beginOp(op.getLoc());
      // The scalars the body reads, defined again in the op's function.
      IRMapping local;
      SetVector<Value> above;
      getUsedValuesDefinedAbove(generic.getRegion(), above);
      for (Value v : above) {
        auto constant = v.getDefiningOp<arith::ConstantOp>();
        if (!constant)
          return generic.emitOpError("reads a value defined outside it that "
                                     "is not a constant");
        local.map(v, ob.clone(*constant)->getResult(0));
      }
      // Element-wise over operands of one shape (identity maps, no
      // index reads): one loop over the elements instead of a nest.
      SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
      SmallVector<utils::IteratorType> iterators =
          generic.getIteratorTypesArray();
      std::optional<SmallVector<int64_t>> flat;
      if (llvm::all_of(maps, [](AffineMap m) { return m.isIdentity(); }) &&
          llvm::all_of(iterators,
                       [](utils::IteratorType t) {
                         return t == utils::IteratorType::parallel;
                       }) &&
          generic.getRegion().getOps<linalg::IndexOp>().empty() &&
          generic.getNumLoops() > 1)
        flat = SmallVector<int64_t>{product(generic.getStaticLoopRanges())};
      if (flat) {
        maps.assign(maps.size(), ob.getMultiDimIdentityMap(1));
        iterators.assign(1, utils::IteratorType::parallel);
      }
      auto view = [&](Value v) {
        return flat ? viewOf(ob, v, *flat) : viewOf(ob, v);
      };
      SmallVector<Value> ins, outs;
      for (Value v : generic.getDpsInputs())
        ins.push_back(view(v));
      for (Value v : generic.getResults())
        outs.push_back(view(v));
      auto lowered = ob.create<linalg::GenericOp>(generic.getLoc(), TypeRange{},
                                                  ins, outs, maps, iterators);
      generic.getRegion().cloneInto(&lowered.getRegion(), local);
      endOp(b, ob, /*keep=*/true);
      continue;
    }
    if (isKernelOp(&op)) {
      if (failed(emitKernel(b, &op)))
        return failure();
      continue;
    }
    if (auto assign = dyn_cast<AssignParameterOp>(op)) {
      Location_ from = where.lookup(assign.getValue());
      if (from.inParams &&
          from.paramOffset == paramOffsets.lookup(assign.getName()))
        continue; // computed in place
      b.create<memref::CopyOp>(op.getLoc(), viewOf(b, assign.getValue()),
                               viewAt(b, op.getLoc(), params,
                                      paramOffsets.lookup(assign.getName()),
                                      assign.getValue().getType()));
      continue;
    }
    OpBuilder ob = beginOp(op.getLoc());
    FailureOr<bool> moved = emitDataMovement(ob, &op);
    if (failed(moved))
      return failure();
    endOp(b, ob, /*keep=*/*moved);
    if (*moved)
      continue;
    if (isa<func::ReturnOp>(op)) {
      for (auto [value, cls] : outputCopies) {
        b.create<memref::CopyOp>(
            op.getLoc(), viewOf(b, value),
            viewAt(b, op.getLoc(), arena, plan.offsets[cls], value.getType()));
      }
      b.create<func::ReturnOp>(op.getLoc());
      continue;
    }
    return op.emitError("'")
           << op.getName() << "' is not supported by code generation yet";
  }

  // The plan, for the bundle writer and the runtime.
  auto ioEntry = [&](StringAttr name, Role role, Type type, int cls) {
    auto t = cast<RankedTensorType>(type);
    std::string dtype;
    llvm::raw_string_ostream os(dtype);
    os << t.getElementType();
    return builder.getDictionaryAttr({
        builder.getNamedAttr("name", name),
        builder.getNamedAttr("role", RoleAttr::get(builder.getContext(), role)),
        builder.getNamedAttr("offset",
                             builder.getI64IntegerAttr(plan.offsets[cls])),
        builder.getNamedAttr("shape", builder.getI64ArrayAttr(t.getShape())),
        builder.getNamedAttr("dtype", builder.getStringAttr(os.str())),
    });
  };
  SmallVector<Attribute> inputs, outputs;
  for (BlockArgument arg : forward.getArguments()) {
    auto name =
        forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "gpipe.name");
    DictionaryAttr entry = ioEntry(name ? name : builder.getStringAttr("input"),
                                   argRole(forward, arg.getArgNumber()),
                                   arg.getType(), where[arg].cls);
    // Kept in bfloat16 between the phases (the runtime rounds it into the
    // stash and widens it back).
    if (keptBf16[arg.getArgNumber()]) {
      NamedAttrList attrs(entry);
      attrs.set("stash_dtype", builder.getStringAttr("bf16"));
      entry = attrs.getDictionary(builder.getContext());
    }
    // Received in bfloat16 (the runtime widens it into the arena).
    if (receivedBf16[arg.getArgNumber()]) {
      NamedAttrList attrs(entry);
      attrs.set("message_dtype", builder.getStringAttr("bf16"));
      entry = attrs.getDictionary(builder.getContext());
    }
    inputs.push_back(entry);
  }
  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  for (auto [i, type] : llvm::enumerate(forward.getResultTypes())) {
    auto name = forward.getResultAttrOfType<StringAttr>(i, "gpipe.name");
    DictionaryAttr entry =
        ioEntry(name ? name : builder.getStringAttr("output"),
                resultRole(forward, i), type, outputClasses[i]);
    // An output only a kernel writes and nothing else in the phase reads,
    // in its own buffer: the runtime may point the kernel elsewhere (a
    // weight gradient's product adding into the step's sum).
    Value result = ret.getOperand(i);
    Operation *def = result.getDefiningOp();
    if (def && kernelIds.count(def) && result.hasOneUse() &&
        where.lookup(result).cls == outputClasses[i] &&
        !where.lookup(result).inParams) {
      NamedAttrList attrs(entry);
      attrs.set("written_by", builder.getI64IntegerAttr(kernelIds[def]));
      entry = attrs.getDictionary(builder.getContext());
    }
    // Where the batch sits (gpipe-mark-batch-placement), for the runtime.
    if (auto batch = forward.getResultAttr(i, "gpipe.batch")) {
      NamedAttrList attrs(entry);
      attrs.set("batch", batch);
      entry = attrs.getDictionary(builder.getContext());
    }
    outputs.push_back(entry);
  }
  stage->setAttr("gpipe.phase", builder.getStringAttr(forward.getSymName()));
  stage->setAttr("gpipe.arena_size", builder.getI64IntegerAttr(plan.size));
  if (arenaOfForward)
    stage->setAttr("gpipe.arena_of", builder.getStringAttr("forward"));
  stage->setAttr("gpipe.params_size", builder.getI64IntegerAttr(paramsSize));
  stage->setAttr("gpipe.inputs", builder.getArrayAttr(inputs));
  stage->setAttr("gpipe.outputs", builder.getArrayAttr(outputs));
  stage->setAttr("gpipe.kernels", builder.getArrayAttr(kernels));
  stage->setAttr("gpipe.loops", builder.getArrayAttr(loops));
  return success();
}

LogicalResult StageLowering::run() {
  if (!llvm::hasSingleElement(forward.getBody()))
    return forward.emitError("@forward must have a single block");
  if (failed(placeParameters()) || failed(assignBuffers()) || failed(emit()))
    return failure();
  forward.erase();
  return success();
}

struct LowerStagePass : public gpipe::impl::LowerStageBase<LowerStagePass> {
  using LowerStageBase::LowerStageBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(functionName);
    if (!forward) {
      module.emitError("no @") << functionName << " function to lower";
      return signalPassFailure();
    }
    if (failed(StageLowering(module, forward, entryName).run()))
      signalPassFailure();
  }
};

} // namespace
