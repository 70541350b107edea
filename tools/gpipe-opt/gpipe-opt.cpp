//===- gpipe-opt.cpp - The gpipe compiler driver --------------------------===//
//
// Two modes, chosen by the input:
//   gpipe-opt model.onnx --emit=nn [--batch-size=N]   import and print
//   gpipe-opt model.onnx -o model.gpipe               compile a bundle
//   gpipe-opt file.mlir --<pass>...                   like mlir-opt
//
//===----------------------------------------------------------------------===//
#include "Analysis/ModelSummary.h"
#include "Bundle/BundleWriter.h"
#include "GPipe/IR/GPipeDialect.h"
#include "Import/ONNX/ModelImporter.h"
#include "NN/IR/NNDialect.h"
#include "Target/Native/NativeCodegen.h"
#include "Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory gpipeCategory("gpipe options (ONNX input)");

enum class Emit { None, NN, Summary, Stages, Autodiff, Schedule, LLVM };

cl::opt<Emit> emitOption(
    "emit", cl::desc("Stop after a phase and print its IR (ONNX input)"),
    cl::init(Emit::None), cl::cat(gpipeCategory),
    cl::values(
        clEnumValN(Emit::NN, "nn", "the imported model in the nn dialect"),
        clEnumValN(Emit::Summary, "summary",
                   "inputs, outputs, parameters and per-op FLOPs of the "
                   "imported model"),
        clEnumValN(Emit::Stages, "stages",
                   "after partitioning into gpipe.stage regions"),
        clEnumValN(Emit::Autodiff, "autodiff", "after per-stage autodiff"),
        clEnumValN(Emit::Schedule, "schedule",
                   "after the static micro-batch schedule"),
        clEnumValN(Emit::LLVM, "llvm", "the LLVM dialect of each stage")));

enum class Mode { Infer, Train };

cl::opt<Mode> modeOption(
    "mode", cl::desc("What the bundle does (ONNX input with -o)"),
    cl::init(Mode::Infer), cl::cat(gpipeCategory),
    cl::values(clEnumValN(Mode::Infer, "infer",
                          "inference: forward only; dropout is the identity "
                          "and BatchNorm uses its running statistics"),
               clEnumValN(Mode::Train, "train",
                          "training: forward, backward and the loss, run by "
                          "gpipe-run --train")));

cl::opt<std::string> lossOption(
    "loss",
    cl::desc("Training loss: cross-entropy (integer class labels, mean over "
             "the batch), mse, or output:NAME (the model's scalar output "
             "NAME) (--mode=train)"),
    cl::init("cross-entropy"), cl::cat(gpipeCategory));

cl::opt<int64_t> microBatchesOption(
    "micro-batches",
    cl::desc("Split each training batch into M micro-batches whose "
             "gradients are accumulated before one optimizer step "
             "(--mode=train; default 1)"),
    cl::init(1), cl::cat(gpipeCategory));

cl::opt<std::string> recomputeOption(
    "recompute",
    cl::desc("What each stage's forward keeps for its backward (--mode=train): "
             "never (the activations; fastest, most memory), always (only the "
             "stage input; the backward runs the forward again) or "
             "except-last (always, but never on the last stage, whose "
             "backward follows its forward at once; on one stage: never). "
             "Default never"),
    cl::init("never"), cl::cat(gpipeCategory));

cl::opt<std::string> devicesOption(
    "devices",
    cl::desc("Target devices, comma-separated (cpu:N, cuda:N). One device: "
             "the whole model is one stage (the default). Partitioning "
             "across several devices is not implemented yet"),
    cl::value_desc("LIST"), cl::cat(gpipeCategory));

cl::opt<std::string>
    optimizerOption("optimizer",
                    cl::desc("sgd (momentum, Nesterov, weight decay), adam "
                             "(L2 weight decay) or adamw (decoupled weight "
                             "decay) (--mode=train)"),
                    cl::init("sgd"), cl::cat(gpipeCategory));
cl::opt<double> beta1Option("beta1", cl::desc("Adam beta1 (default 0.9)"),
                            cl::init(0.9), cl::cat(gpipeCategory));
cl::opt<double> beta2Option("beta2", cl::desc("Adam beta2 (default 0.999)"),
                            cl::init(0.999), cl::cat(gpipeCategory));
cl::opt<double> epsOption("eps", cl::desc("Adam epsilon (default 1e-8)"),
                          cl::init(1e-8), cl::cat(gpipeCategory));
cl::opt<double> lrOption("lr", cl::desc("Learning rate (default 0.01)"),
                         cl::init(0.01), cl::cat(gpipeCategory));
cl::opt<double> momentumOption("momentum", cl::desc("SGD momentum (default 0)"),
                               cl::init(0.0), cl::cat(gpipeCategory));
cl::opt<bool> nesterovOption("nesterov", cl::desc("Nesterov momentum"),
                             cl::init(false), cl::cat(gpipeCategory));
cl::opt<double> weightDecayOption("weight-decay",
                                  cl::desc("L2 weight decay (default 0)"),
                                  cl::init(0.0), cl::cat(gpipeCategory));

cl::opt<int64_t> batchSizeOption(
    "batch-size",
    cl::desc("Batch size N: replaces the symbolic (or first) dimension of "
             "every graph input (ONNX input; default: the model's static "
             "batch)"),
    cl::init(0), cl::cat(gpipeCategory));

cl::list<std::string> constInputOption(
    "const-input",
    cl::desc("NAME=FILE: make graph input NAME a compile-time constant with "
             "the value of FILE, a serialized ONNX TensorProto (.pb); for "
             "inputs that must be static, like a Reshape's shape (ONNX "
             "input; repeatable)"),
    cl::value_desc("NAME=FILE"), cl::cat(gpipeCategory));

cl::opt<bool> printOnnxOps(
    "print-onnx-ops",
    cl::desc("Print the ONNX op types the importer accepts, one per line "
             "(domain-qualified outside the default domain), and exit"),
    cl::init(false), cl::cat(gpipeCategory));

bool isONNXFile(StringRef path) {
  return llvm::sys::path::extension(path).equals_insensitive(".onnx");
}

/// One line per diagnostic: "<file>: error: node 'n': message".
void printDiagnostic(Diagnostic &diag) {
  std::string file, node;
  diag.getLocation()->walk([&](Location loc) {
    if (auto f = dyn_cast<FileLineColLoc>(loc); f && file.empty())
      file = f.getFilename().str();
    if (auto n = dyn_cast<NameLoc>(loc); n && node.empty())
      node = n.getName().str();
    return WalkResult::advance();
  });
  llvm::raw_ostream &os = llvm::errs();
  if (!file.empty())
    os << file << ": ";
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error:
    os << "error: ";
    break;
  case DiagnosticSeverity::Warning:
    os << "warning: ";
    break;
  case DiagnosticSeverity::Note:
    os << "note: ";
    break;
  case DiagnosticSeverity::Remark:
    os << "remark: ";
    break;
  }
  if (!node.empty())
    os << "node '" << node << "': ";
  std::string message = diag.str();
  std::replace(message.begin(), message.end(), '\n', ' ');
  os << message << "\n";
}

/// The pipeline from the imported nn module to one lowered stage: for
/// training, loss and reverse sweep first; for inference, inference mode.
LogicalResult lowerToStage(ModuleOp module, bool training) {
  PassManager pm(module.getContext());
  gpipe::LowerStageOptions lower;
  if (training) {
    gpipe::AppendLossOptions loss;
    loss.loss = lossOption;
    pm.addPass(gpipe::createAppendLoss(loss));
    pm.addPass(gpipe::createAutodiff());
    gpipe::SplitForwardBackwardOptions split;
    split.recompute = recomputeOption;
    pm.addPass(gpipe::createSplitForwardBackward(split));
    gpipe::AppendOptimizerOptions optimizer;
    optimizer.optimizer = optimizerOption;
    optimizer.momentum = momentumOption != 0.0;
    optimizer.nesterov = nesterovOption;
    pm.addPass(gpipe::createAppendOptimizer(optimizer));
  } else {
    pm.addPass(gpipe::createSetInferenceMode());
  }
  pm.addPass(gpipe::createConvertElementwiseToLinalg());
  pm.addPass(createLinalgElementwiseOpFusionPass());
  pm.addPass(gpipe::createLowerStage(lower));
  if (training) {
    gpipe::LowerStageOptions backward;
    backward.functionName = "backward";
    backward.entryName = "gpipe_stage0_backward";
    pm.addPass(gpipe::createLowerStage(backward));
    gpipe::LowerStageOptions update;
    update.functionName = "optimizer";
    update.entryName = "gpipe_stage0_optimizer";
    pm.addPass(gpipe::createLowerStage(update));
  }
  return pm.run(module);
}

int notImplemented(StringRef what) {
  llvm::errs() << "gpipe-opt: error: " << what
               << " is not implemented yet; this version can import ONNX "
                  "models (--emit=nn) and run passes on .mlir files\n";
  return 2;
}

int compileONNX(StringRef input, StringRef output, DialectRegistry &registry) {
  MLIRContext context(registry);
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diag) {
    printDiagnostic(diag);
    return success();
  });
  switch (emitOption) {
  case Emit::Stages:
    return notImplemented("--emit=stages");
  case Emit::Autodiff:
    return notImplemented("--emit=autodiff");
  case Emit::Schedule:
    return notImplemented("--emit=schedule");
  case Emit::None:
  case Emit::LLVM:
    if (modeOption != Mode::Train) {
      for (llvm::cl::Option *o : std::initializer_list<llvm::cl::Option *>{
               &lossOption, &microBatchesOption, &recomputeOption,
               &optimizerOption, &lrOption, &momentumOption, &nesterovOption,
               &weightDecayOption, &beta1Option, &beta2Option, &epsOption})
        if (o->getNumOccurrences()) {
          llvm::errs() << "gpipe-opt: error: --" << o->ArgStr
                       << " applies to training bundles only (add "
                          "--mode=train)\n";
          return 1;
        }
    }
    if (modeOption == Mode::Train && recomputeOption != "never" &&
        recomputeOption != "always" && recomputeOption != "except-last") {
      llvm::errs() << "gpipe-opt: error: --recompute=" << recomputeOption
                   << " is not a recompute mode: use never, always or "
                      "except-last\n";
      return 1;
    }
    if (modeOption == Mode::Train && optimizerOption != "sgd" &&
        optimizerOption != "adam" && optimizerOption != "adamw") {
      llvm::errs() << "gpipe-opt: error: --optimizer=" << optimizerOption
                   << " is not an optimizer: use sgd, adam or adamw\n";
      return 1;
    }
    if (emitOption == Emit::None && output == "-") {
      llvm::errs() << "gpipe-opt: error: name the bundle to write with "
                      "-o model.gpipe (or pass --emit=nn to print the IR)\n";
      return 1;
    }
    break;
  case Emit::NN:
  case Emit::Summary:
    break;
  }
  gpipe::ONNXImportOptions options;
  if (batchSizeOption.getNumOccurrences())
    options.batchSize = batchSizeOption;
  bool training = modeOption == Mode::Train &&
                  (emitOption == Emit::None || emitOption == Emit::LLVM);
  if (microBatchesOption < 1) {
    llvm::errs() << "gpipe-opt: error: --micro-batches must be at least 1\n";
    return 1;
  }
  if (StringRef(devicesOption).contains(',')) {
    llvm::errs() << "gpipe-opt: error: --devices=" << devicesOption
                 << ": partitioning a model across several devices is not "
                    "implemented yet; compile for one device\n";
    return 2;
  }
  if (training && microBatchesOption > 1) {
    if (!batchSizeOption.getNumOccurrences()) {
      llvm::errs() << "gpipe-opt: error: --micro-batches needs --batch-size "
                      "(the samples of one optimizer step)\n";
      return 1;
    }
    if (batchSizeOption % microBatchesOption != 0) {
      llvm::errs() << "gpipe-opt: error: --batch-size=" << batchSizeOption
                   << " does not split into " << microBatchesOption
                   << " equal micro-batches\n";
      return 1;
    }
    options.batchSize = batchSizeOption / microBatchesOption;
  }
  for (const std::string &binding : constInputOption) {
    auto [name, file] = StringRef(binding).split('=');
    if (name.empty() || file.empty()) {
      llvm::errs() << "gpipe-opt: error: --const-input expects NAME=FILE, got '"
                   << binding << "'\n";
      return 1;
    }
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      llvm::errs() << "gpipe-opt: error: --const-input: cannot read '" << file
                   << "': " << buffer.getError().message() << "\n";
      return 1;
    }
    options.constantInputs.emplace_back(name.str(),
                                        (*buffer)->getBuffer().str());
  }
  OwningOpRef<ModuleOp> module =
      gpipe::importONNXFile(input, &context, options);
  if (!module)
    return 1;
  if (emitOption == Emit::None || emitOption == Emit::LLVM) {
    if (failed(lowerToStage(*module, training)))
      return 1;
    if (emitOption == Emit::None) {
      gpipe::BundleOptions bundleOptions;
      bundleOptions.sourceName = llvm::sys::path::filename(input).str();
      bundleOptions.sourcePath = input.str();
      if (training) {
        bundleOptions.mode = "train";
        gpipe::TrainingOptions &t = bundleOptions.training;
        t.microBatches = microBatchesOption;
        t.loss = lossOption;
        t.optimizer = optimizerOption;
        t.lr = lrOption;
        t.momentum = momentumOption;
        t.nesterov = nesterovOption;
        t.weightDecay = weightDecayOption;
        t.beta1 = beta1Option;
        t.beta2 = beta2Option;
        t.eps = epsOption;
        t.batchSize = batchSizeOption.getNumOccurrences()
                          ? static_cast<int64_t>(batchSizeOption)
                          : 0; // filled from the model below
      }
      return failed(gpipe::writeBundle(*module, output, bundleOptions)) ? 1 : 0;
    }
    if (failed(gpipe::lowerStageToLLVMDialect(*module)))
      return 1;
  }
  // Written to a temporary file and renamed: a failed run leaves no
  // partial output behind.
  llvm::Error err = llvm::writeToOutput(output, [&](llvm::raw_ostream &os) {
    if (emitOption == Emit::Summary)
      gpipe::printModelSummary(*module, os);
    else
      module->print(os, OpPrintingFlags());
    return llvm::Error::success();
  });
  if (err) {
    llvm::errs() << "gpipe-opt: error: cannot write '" << output
                 << "': " << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  DialectRegistry registry;
  gpipe::registerONNXImportDialects(registry);
  registry
      .insert<arith::ArithDialect, cf::ControlFlowDialect,
              linalg::LinalgDialect, LLVM::LLVMDialect, math::MathDialect,
              memref::MemRefDialect, scf::SCFDialect, tensor::TensorDialect>();
  registerLinalgPasses();
  registerTransformsPasses();
  gpipe::registerGPipePasses();

  auto [input, output] = registerAndParseCLIOptions(
      argc, argv,
      "gpipe-opt: the gpipe compiler\n\n"
      "  gpipe-opt model.onnx --emit=nn [--batch-size=N] [-o out.mlir]\n"
      "      import an ONNX model (opsets 11-17) and print it in the nn "
      "dialect\n"
      "  gpipe-opt model.onnx -o model.gpipe [--mode=infer] [--batch-size=N]\n"
      "      compile an inference bundle for gpipe-run --infer\n"
      "  gpipe-opt model.onnx -o model.gpipe --mode=train --batch-size=B\n"
      "      [--micro-batches=M] [--loss=...] [--optimizer=sgd|adam|adamw]\n"
      "      compile a training bundle for gpipe-run --train (one stage on "
      "one\n      device; pipelining is not implemented yet)\n"
      "  gpipe-opt file.mlir [--pass...] [--split-input-file] "
      "[--verify-diagnostics]\n"
      "      run passes on MLIR input, like mlir-opt\n",
      registry);

  if (printOnnxOps) {
    SmallVector<StringRef> ops;
    std::string list = gpipe::supportedONNXOps();
    StringRef(list).split(ops, ", ");
    for (StringRef op : ops)
      llvm::outs() << op << "\n";
    return 0;
  }
  if (isONNXFile(input))
    return compileONNX(input, output, registry);
  if (emitOption.getNumOccurrences() || batchSizeOption.getNumOccurrences() ||
      constInputOption.getNumOccurrences()) {
    llvm::errs() << "gpipe-opt: error: --emit, --batch-size and --const-input "
                    "apply to ONNX input (a .onnx file); '"
                 << input << "' is read as MLIR\n";
    return 1;
  }
  return asMainReturnCode(MlirOptMain(argc, argv, input, output, registry));
}
