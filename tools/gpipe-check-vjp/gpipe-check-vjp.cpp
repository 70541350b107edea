//===- gpipe-check-vjp.cpp - Finite-difference checks of VJP rules --------===//
//
// For every function of an .mlir file: its floating-point arguments become
// trainable parameters holding random values, its first result y is reduced
// to the scalar L = sum(y * c) with a random cotangent c, gpipe-autodiff
// builds the reverse sweep from the ops' VJP rules, and every derivative
// dL/dx is compared with the central difference (L(x+h) - L(x-h)) / 2h, all
// evaluated in float64 by the reference evaluator.
//
//   gpipe-check-vjp cases.mlir [--seed=N] [--tolerance=T] [--max-elements=K]
//   gpipe-check-vjp --list-without-vjp
//
// The second form prints every differentiable nn op that has no VJP rule
// (an nn op with operands that is not itself a gradient op, `*_grad*`), one
// per line, and exits 1 if there is any.
//
// Argument attributes: `check.positive` draws from [0.5, 2] instead of a
// standard normal (for sqrt, div, pow). Prints one line per function and
// exits 1 if any derivative is off by more than the tolerance, relative to
// the largest derivative of that argument.
//
//===----------------------------------------------------------------------===//
#include "Analysis/ReferenceEvaluator.h"
#include "GPipe/IR/GPipeDialect.h"
#include "GPipe/IR/GPipeOps.h"
#include "NN/IR/NNDialect.h"
#include "NN/IR/NNOps.h"
#include "Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace gpipe;

namespace cl = llvm::cl;

static cl::opt<bool> listWithoutVJP(
    "list-without-vjp",
    cl::desc("print the nn forward ops that have no VJP rule and exit"),
    cl::init(false));
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<cases.mlir>"),
                                      cl::Optional);
static cl::opt<unsigned> seed("seed", cl::desc("random seed (default 1)"),
                              cl::init(1));
static cl::opt<double>
    tolerance("tolerance",
              cl::desc("largest accepted |analytic - finite difference| "
                       "relative to the argument's largest derivative "
                       "(default 1e-6)"),
              cl::init(1e-6));
static cl::opt<unsigned> maxElements(
    "max-elements",
    cl::desc("derivatives checked per argument, drawn at random beyond "
             "this (default 200)"),
    cl::init(200));

namespace {

struct CaseResult {
  double worst = 0;
  int64_t checked = 0;
};

DenseElementsAttr randomTensor(RankedTensorType type, bool positive,
                               std::mt19937_64 &rng) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.5, 2.0);
  SmallVector<APFloat> values;
  auto floatType = cast<FloatType>(type.getElementType());
  for (int64_t i = 0; i < type.getNumElements(); ++i) {
    APFloat v(positive ? uniform(rng) : normal(rng));
    bool lost;
    v.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
              &lost);
    values.push_back(v);
  }
  return DenseElementsAttr::get(type, values);
}

/// Builds module { parameters; func @forward() -> L } from `source`.
FailureOr<OwningOpRef<ModuleOp>> buildCase(func::FuncOp source,
                                           std::mt19937_64 &rng) {
  MLIRContext *context = source.getContext();
  OpBuilder b(context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(source.getLoc());
  b.setInsertionPointToStart(module->getBody());
  auto forward = cast<func::FuncOp>(b.clone(*source));
  forward.setSymName("forward");
  Block &body = forward.front();
  b.setInsertionPointToStart(&body);
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto type = dyn_cast<RankedTensorType>(forward.getArgument(i).getType());
    if (!type || !isa<FloatType>(type.getElementType()))
      return source.emitError("argument ")
             << i << " is not a floating-point tensor (put integer inputs "
             << "in the body as nn.constant)";
    bool positive = static_cast<bool>(forward.getArgAttr(i, "check.positive"));
    OpBuilder mb(context);
    mb.setInsertionPoint(forward);
    std::string name = "arg" + std::to_string(i);
    mb.create<ParameterOp>(source.getLoc(), name,
                           randomTensor(type, positive, rng), true);
    auto get = b.create<GetParameterOp>(source.getLoc(), type,
                                        FlatSymbolRefAttr::get(context, name));
    forward.getArgument(i).replaceAllUsesWith(get.getResult());
  }
  forward.eraseArguments(llvm::BitVector(forward.getNumArguments(), true));

  // L = sum(y * c).
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() == 0)
    return source.emitError("the function returns nothing");
  Value y = ret.getOperand(0);
  auto yType = cast<RankedTensorType>(y.getType());
  b.setInsertionPoint(ret);
  Location loc = source.getLoc();
  Value c =
      b.create<nn::ConstantOp>(loc, ValueRange{},
                               ArrayRef<NamedAttribute>{b.getNamedAttr(
                                   "value", randomTensor(yType, false, rng))});
  Value weighted =
      b.create<nn::MulOp>(loc, ValueRange{y, c}, ArrayRef<NamedAttribute>{});
  Value loss = weighted;
  if (yType.getRank() > 0) {
    SmallVector<int64_t> axes;
    for (int64_t i = 0; i < yType.getRank(); ++i)
      axes.push_back(i);
    loss = b.create<nn::ReduceSumOp>(
        loc, ValueRange{weighted},
        ArrayRef<NamedAttribute>{
            b.getNamedAttr("axes", b.getDenseI64ArrayAttr(axes)),
            b.getNamedAttr("keepdims", b.getBoolAttr(false))});
  }
  b.create<func::ReturnOp>(loc, loss);
  ret.erase();
  forward.setType(b.getFunctionType({}, {loss.getType()}));
  forward.setAllResultAttrs(ArrayRef<DictionaryAttr>{b.getDictionaryAttr({})});
  return module;
}

FailureOr<CaseResult> checkCase(func::FuncOp source, std::mt19937_64 &rng) {
  auto built = buildCase(source, rng);
  if (failed(built))
    return failure();
  ModuleOp forwardModule = built->get();
  OwningOpRef<ModuleOp> gradModule = forwardModule.clone();
  PassManager pm(source.getContext());
  pm.addPass(gpipe::createAutodiff());
  if (failed(pm.run(*gradModule)))
    return failure();

  llvm::StringMap<RefTensor> params;
  SmallVector<StringRef> names;
  for (auto p : forwardModule.getOps<ParameterOp>()) {
    params[p.getSymName()] = toRefTensor(cast<DenseElementsAttr>(p.getValue()));
    names.push_back(p.getSymName());
  }
  auto forward = forwardModule.lookupSymbol<func::FuncOp>("forward");
  auto fb = gradModule->lookupSymbol<func::FuncOp>("forward_backward");
  RefTensor one = RefTensor::zeros({});
  one.data[0] = 1.0;
  auto analytic = evaluateReference(fb, {one}, params);
  if (failed(analytic))
    return failure();
  auto lossAt = [&]() -> FailureOr<double> {
    auto r = evaluateReference(forward, {}, params);
    if (failed(r))
      return failure();
    return (*r)[0].data[0];
  };

  CaseResult result;
  for (auto [k, name] : llvm::enumerate(names)) {
    const RefTensor &grad = (*analytic)[1 + k];
    RefTensor &x = params[name];
    double scale = 1e-12;
    for (double g : grad.data)
      scale = std::max(scale, std::abs(g));
    std::vector<int64_t> elements(x.data.size());
    for (size_t i = 0; i < elements.size(); ++i)
      elements[i] = static_cast<int64_t>(i);
    if (elements.size() > maxElements) {
      std::shuffle(elements.begin(), elements.end(), rng);
      elements.resize(maxElements);
    }
    for (int64_t i : elements) {
      double saved = x.data[i];
      double h = 1e-6 * std::max(1.0, std::abs(saved));
      x.data[i] = saved + h;
      auto plus = lossAt();
      x.data[i] = saved - h;
      auto minus = lossAt();
      x.data[i] = saved;
      if (failed(plus) || failed(minus))
        return failure();
      double fd = (*plus - *minus) / (2 * h);
      result.worst =
          std::max(result.worst, std::abs(fd - grad.data[i]) / scale);
      ++result.checked;
    }
  }
  return result;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv,
      "gpipe-check-vjp: checks the VJP rules of nn ops against central "
      "finite differences in float64\n");
  DialectRegistry registry;
  registry.insert<func::FuncDialect, nn::NNDialect, GPipeDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  if (listWithoutVJP) {
    // nn.constant has no operands: nothing to differentiate.
    int missing = 0;
    for (RegisteredOperationName op : context.getRegisteredOperations()) {
      StringRef name = op.getStringRef();
      if (!name.starts_with("nn.") || name.contains("_grad") ||
          name == "nn.constant" || op.hasInterface<nn::VJPOpInterface>())
        continue;
      llvm::outs() << name << "\n";
      ++missing;
    }
    llvm::outs() << missing << " nn forward ops without a VJP rule\n";
    return missing ? 1 : 0;
  }
  if (inputFile.empty()) {
    llvm::errs() << "gpipe-check-vjp: name the cases file (or pass "
                    "--list-without-vjp)\n";
    return 2;
  }
  llvm::SourceMgr sources;
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(inputFile, sources, &context);
  if (!module)
    return 1;
  std::mt19937_64 rng(seed);
  int failures = 0;
  for (auto func : module->getOps<func::FuncOp>()) {
    auto result = checkCase(func, rng);
    if (failed(result)) {
      llvm::outs() << func.getSymName() << ": FAILED to evaluate\n";
      ++failures;
      continue;
    }
    bool ok = result->worst <= tolerance;
    failures += !ok;
    llvm::outs() << func.getSymName() << ": " << (ok ? "ok" : "FAIL") << ", "
                 << result->checked << " derivatives, worst error "
                 << llvm::format("%.1e", result->worst) << "\n";
  }
  return failures ? 1 : 0;
}
