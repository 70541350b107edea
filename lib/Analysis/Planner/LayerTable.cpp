//===- LayerTable.cpp - The layers of @forward as the planner weighs them -===//
#include "Analysis/Planner/LayerTable.h"

#include "Analysis/ProductPrecision.h"

#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNOps.h"
#include "gpipe/common/KernelFamily.h"

#include <algorithm>

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace gpipe;

namespace {
bool isLayer(Operation &op) {
  return !isa<GetParameterOp, func::ReturnOp>(op) &&
         !op.hasTrait<OpTrait::ConstantLike>();
}
/// Seconds of a generated loop moving `bytes` (forward or backward): the
/// profile's fit of the element-wise loops, else the memory bandwidth; a
/// loop that moves nothing (an alias) costs nothing.
double loopSeconds(StringRef family, double bytes, bool backward,
                   const DeviceProfile &profile) {
  if (bytes <= 0)
    return 0;
  if (std::optional<double> fitted =
          profile.loopSeconds(family, bytes, backward))
    return *fitted;
  return rooflineSeconds(0, bytes, profile);
}
} // namespace

LayerTable LayerTable::build(func::FuncOp forward, int64_t optimizerSlots,
                             const CostTable *table) {
  LayerTable t;
  t.rows = microBatchRows(forward);
  Block &body = forward.front();
  for (Operation &op : body)
    if (isLayer(op))
      t.layers.push_back(&op);
  int64_t n = t.size();
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(t.layers))
    position[op] = i;
  t.flops.assign(n, 0);
  t.bytesMoved.assign(n, 0);
  t.backwardBytesMoved.assign(n, 0);
  t.constantBytes.assign(n, 0);
  t.activationBytes.assign(n, 0);
  t.planes.assign(n, 0);
  t.paramBytes.assign(n, 0);
  t.trainableBytes.assign(n, 0);
  t.productSummedBytes.assign(n, 0);
  t.crossBytes.assign(n + 1, 0);
  t.crossMessageBytes.assign(n + 1, 0);
  t.measured.assign(n, std::nullopt);
  t.family.assign(n, "");
  t.backwardFamily.assign(n, "");
  t.backwardShare.assign(n, 1);
  t.weightShare.assign(n, 0);
  t.inputGradient.assign(n, true);
  // The trainable parameters' names, looked up once.
  llvm::StringSet<> trainableNames;
  for (ParameterOp param :
       forward->getParentOfType<ModuleOp>().getOps<ParameterOp>())
    if (param.getTrainable())
      trainableNames.insert(param.getSymName());
  auto trainable = [&](Value v) {
    auto get = v.getDefiningOp<GetParameterOp>();
    return get && trainableNames.contains(get.getName());
  };
  // The values that depend on a trainable parameter: the backward
  // differentiates only them (the rest is dead code after autodiff).
  llvm::DenseSet<Value> varying;
  llvm::StringSet<> counted;
  // Per parameter: the layers reading it, and its bytes as paramBytes
  // counts them (and trainable).
  llvm::StringMap<SmallVector<int64_t>> readersOf;
  llvm::StringMap<std::pair<double, double>> sharedBytes;
  // A cost table's row is every kernel and loop timed under its name
  // (gpipe-run --profile-ops): of the ops sharing a name (an ONNX node
  // imported as several ops, the appended loss's reshapes), the last
  // carries the row's seconds and the others none.
  llvm::StringMap<int64_t> lastNamed;
  if (table)
    for (auto [i, op] : llvm::enumerate(t.layers))
      lastNamed[costTableKey(op)] = static_cast<int64_t>(i);
  for (auto [i, op] : llvm::enumerate(t.layers)) {
    if (table) {
      std::string key = costTableKey(op);
      auto it = table->find(key);
      if (it != table->end())
        t.measured[i] = lastNamed.lookup(key) == static_cast<int64_t>(i)
                            ? it->second
                            : OpCost{0, 0.0};
    }
    if (auto cost = dyn_cast<nn::CostOpInterface>(op)) {
      t.flops[i] = static_cast<double>(cost.getFlops());
      t.bytesMoved[i] = static_cast<double>(cost.getBytesMoved());
      t.backwardBytesMoved[i] =
          static_cast<double>(cost.getBackwardBytesMoved());
      t.family[i] = cost.getKernelFamily().str();
      t.backwardFamily[i] = cost.getBackwardKernelFamily().str();
    }
    if (op->getNumResults() > 0)
      if (auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
          type && type.hasStaticShape()) {
        // A map's two dimensions (NCHW and NCDHW alike); a matrix's or a
        // sequence's last; a stack's matrices for a family that prices
        // them (KernelPlanes::Matrices).
        const KernelFamily *family = findKernelFamily(t.family[i]);
        int64_t inner = family && family->planes == KernelPlanes::Matrices
                            ? std::min<int64_t>(2, type.getRank())
                        : type.getRank() >= 4 ? type.getRank() - 2
                                              : 1;
        double p = 1;
        for (int64_t d = 0; d < type.getRank() - inner; ++d)
          p *= static_cast<double>(type.getDimSize(d));
        t.planes[i] = p;
      }
    bool activation = false, parameter = false;
    for (Value operand : op->getOperands()) {
      parameter |= trainable(operand);
      activation |= varying.contains(operand);
    }
    if (activation || parameter)
      varying.insert(op->getResults().begin(), op->getResults().end());
    // Of a matmul or convolution on the data itself, the weights' gradient
    // only: half its family's backward; a narrow convolution's fit is a
    // first layer's (its weights' gradient alone: where such layers are),
    // so a narrow one deeper in costs its input's gradient as much again.
    bool narrow = t.family[i] == "narrow_conv";
    t.inputGradient[i] = activation;
    if (!activation)
      t.backwardShare[i] = !parameter                  ? 0
                           : narrow                    ? 1
                           : timedByFlops(t.family[i]) ? 0.5
                                                       : 1;
    else if (narrow)
      t.backwardShare[i] = 2;
    t.weightShare[i] = !parameter                  ? 0
                       : !activation               ? 1
                       : timedByFlops(t.family[i]) ? 0.5
                                                   : 0;
    for (Value r : op->getResults()) {
      double bytes = nn::detail::numBytes(r.getType());
      t.activationBytes[i] += bytes;
      int64_t last = i;
      for (Operation *user : r.getUsers())
        last = std::max(last,
                        isa<func::ReturnOp>(user) ? n : position.lookup(user));
      t.lastUse[r] = last;
      double sent = onlyMultipliedInBf16(r)
                        ? bf16StashBytes(static_cast<int64_t>(bytes))
                        : bytes;
      for (int64_t c = i + 1; c <= std::min(last, n - 1); ++c) {
        t.crossBytes[c] += bytes;
        t.crossMessageBytes[c] += sent;
      }
    }
    for (OpOperand &use : op->getOpOperands()) {
      Value operand = use.get();
      Operation *def = operand.getDefiningOp();
      if (!def ||
          !(isa<GetParameterOp>(def) || def->hasTrait<OpTrait::ConstantLike>()))
        continue;
      double bytes = nn::detail::numBytes(operand.getType());
      t.constantBytes[i] += bytes;
      auto get = dyn_cast<GetParameterOp>(def);
      if (!get)
        continue;
      bool trained = trainableNames.contains(get.getName());
      SmallVector<int64_t> &readers = readersOf[get.getName()];
      if (readers.empty() || readers.back() != i)
        readers.push_back(i);
      // Beside the float32 parameter (with its gradient and optimizer
      // state where trained), the bfloat16 copies the products read (a
      // convolution's input gradient among them where it has one).
      double held = (trained ? bytes * (2 + optimizerSlots) : bytes) +
                    static_cast<double>(
                        bf16CopyBytes(operand, static_cast<int64_t>(bytes),
                                      /*convGradInput=*/t.inputGradient[i]));
      sharedBytes[get.getName()] = {held, trained ? bytes : 0.0};
      if (!counted.insert(get.getName()).second)
        continue;
      t.paramBytes[i] += held;
      if (trained)
        t.trainableBytes[i] += bytes;
      if (trained && isa<nn::GemmOp, nn::MatMulOp>(op) &&
          use.getOperandNumber() == 1)
        t.productSummedBytes[i] += bytes;
    }
    // An op reads each parameter at most once per execution.
    t.constantBytes[i] = std::min(t.constantBytes[i], t.bytesMoved[i]);
  }
  for (auto &entry : readersOf)
    if (entry.second.size() > 1) {
      auto [bytes, trainableBytes] = sharedBytes.lookup(entry.getKey());
      t.shared.push_back({entry.second, bytes, trainableBytes});
    }
  // Code generation fuses an element-wise op into the element-wise op
  // that is its result's only user (linalg's element-wise fusion, same
  // shape): one loop, which never writes nor reads the result in between.
  // Its bytes count with its user's, the result's write and read taken
  // off.
  auto generatedElementwise = [](Operation *op) {
    auto e = dyn_cast<nn::ElementwiseOpInterface>(op);
    return e && e.hasScalarForm(); // else a kernel (random dropout)
  };
  for (auto [i, op] : llvm::enumerate(t.layers)) {
    if (!generatedElementwise(op) || op->getNumResults() != 1 ||
        !op->getResult(0).hasOneUse())
      continue;
    Value result = op->getResult(0);
    Operation *user = *result.getUsers().begin();
    auto j = position.find(user);
    if (!generatedElementwise(user) || j == position.end() ||
        user->getNumResults() != 1 ||
        user->getResult(0).getType() != result.getType())
      continue;
    double between = 2 * nn::detail::numBytes(result.getType());
    t.bytesMoved[j->second] += std::max(0.0, t.bytesMoved[i] - between);
    t.constantBytes[j->second] += t.constantBytes[i];
    t.bytesMoved[i] = t.constantBytes[i] = 0;
  }
  return t;
}

bool gpipe::timedByFlops(llvm::StringRef family) {
  const KernelFamily *f = findKernelFamily(family);
  return f && f->timing == KernelTiming::Flops;
}

bool gpipe::workIsOpFlops(llvm::StringRef family) {
  const KernelFamily *f = findKernelFamily(family);
  return f &&
         (f->timing == KernelTiming::Flops || f->timing == KernelTiming::Taps);
}

bool gpipe::isGeneratedLoop(llvm::StringRef family) {
  const KernelFamily *f = findKernelFamily(family);
  return f && f->timing == KernelTiming::Loop;
}

bool gpipe::pricesPlanes(llvm::StringRef family) {
  const KernelFamily *f = findKernelFamily(family);
  return f && f->planes != KernelPlanes::None;
}

bool gpipe::convertsParameters(llvm::StringRef family) {
  const KernelFamily *f = findKernelFamily(family);
  return f && f->convertsParameters;
}

double LayerTable::conversionSeconds(int64_t i, const DeviceProfile &profile,
                                     bool backward) const {
  if (measured[i] || !convertsParameters(family[i]) ||
      (backward && !inputGradient[i]))
    return 0;
  return profile.conversionSeconds(family[i], constantBytes[i], backward);
}

int64_t LayerTable::microBatchRows(func::FuncOp forward) {
  for (Type type : forward.getArgumentTypes())
    if (auto ranked = dyn_cast<RankedTensorType>(type))
      if (ranked.getRank() > 0 && !ranked.isDynamicDim(0))
        return ranked.getDimSize(0);
  return 0;
}

double LayerTable::bytes(int64_t i, int64_t r) const {
  return constantBytes[i] + (bytesMoved[i] - constantBytes[i]) * scale(r);
}

double LayerTable::backwardBytes(int64_t i, int64_t r) const {
  return bytesMoved[i] > 0 ? backwardBytesMoved[i] * bytes(i, r) / bytesMoved[i]
                           : backwardBytesMoved[i] * scale(r);
}

double LayerTable::work(int64_t i, int64_t r) const {
  return workIsOpFlops(family[i]) ? flops[i] * scale(r) : bytes(i, r);
}

double LayerTable::forwardSeconds(int64_t i, const DeviceProfile &profile,
                                  int64_t r) const {
  double s = scale(r);
  if (measured[i])
    return measured[i]->forward * s;
  if (family[i].empty())
    return 0; // not an op with kernels (CostOpInterface)
  if (isGeneratedLoop(family[i]))
    return loopSeconds(family[i], bytes(i, r), /*backward=*/false, profile);
  if (std::optional<double> fitted = profile.kernelSeconds(
          family[i], work(i, r), bytes(i, r),
          /*backward=*/false, constantBytes[i], planesAt(i, r)))
    return *fitted;
  return rooflineSeconds(flops[i] * s, bytes(i, r), profile);
}

double LayerTable::SharedParameter::bytesIn(int64_t begin, int64_t end,
                                            double &trainable) const {
  bool inside = false, outside = false;
  for (int64_t r : readers)
    (r >= begin && r < end ? inside : outside) = true;
  if (!inside)
    return 0;
  double held = 0;
  if (readers.front() < begin) { // a copy of its own
    held += bytes;
    trainable += trainableBytes;
  }
  if (outside) // the tied gradient's host copy and its message(s)
    held += 2 * trainableBytes;
  return held;
}

void LayerTable::setStash(llvm::ArrayRef<StashedValue> values) {
  int64_t n = size();
  stashDefinedBefore.assign(n + 1, 0);
  // Crossing: a difference array over the cuts each value spans.
  llvm::SmallVector<double> delta(n + 2, 0);
  for (const StashedValue &v : values) {
    if (v.layer >= 0 && v.layer < n)
      stashDefinedBefore[v.layer + 1] += v.bytes;
    int64_t first = v.layer + 1, last = std::min(v.lastUse, n);
    if (first <= last) {
      delta[first] += v.bytes;
      delta[last + 1] -= v.bytes;
    }
  }
  stashCrossing.assign(n + 1, 0);
  double crossing = 0;
  for (int64_t i = 0; i <= n; ++i) {
    if (i > 0)
      stashDefinedBefore[i] += stashDefinedBefore[i - 1];
    crossing += delta[i];
    stashCrossing[i] = crossing;
  }
}

std::optional<double> LayerTable::stashBytes(int64_t begin, int64_t end,
                                             int64_t r) const {
  if (stashCrossing.empty())
    return std::nullopt;
  // Defined in the stage, or defined before it and read in it.
  return (stashDefinedBefore[end] - stashDefinedBefore[begin] +
          stashCrossing[begin]) *
         scale(r);
}

double LayerTable::backwardSeconds(int64_t i, const DeviceProfile &profile,
                                   int64_t r) const {
  if (measured[i] && measured[i]->backward)
    return *measured[i]->backward * scale(r);
  return backwardShare[i] * fullBackwardSeconds(i, profile, r);
}

double LayerTable::fullBackwardSeconds(int64_t i, const DeviceProfile &profile,
                                       int64_t r) const {
  if (measured[i] || family[i].empty())
    return 2 * forwardSeconds(i, profile, r);
  const std::string &f = backwardFamily[i];
  if (isGeneratedLoop(f))
    return loopSeconds(f, backwardBytes(i, r), /*backward=*/true, profile);
  if (std::optional<double> fitted = profile.kernelSeconds(
          f, work(i, r), bytes(i, r),
          /*backward=*/true, constantBytes[i], planesAt(i, r)))
    return *fitted;
  // The gradients of the inputs and of the weights: two forwards.
  return 2 * forwardSeconds(i, profile, r);
}
