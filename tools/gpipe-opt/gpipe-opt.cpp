//===- gpipe-opt.cpp - The gpipe compiler driver --------------------------===//
//
// Two modes, chosen by the input:
//   gpipe-opt model.onnx --emit=nn [--batch-size=N]   import and print
//   gpipe-opt model.onnx -o model.gpipe               compile a bundle
//   gpipe-opt file.mlir --<pass>...                   like mlir-opt
//
//===----------------------------------------------------------------------===//
#include "Analysis/CostModel.h"
#include "Analysis/ModelSummary.h"
#include "Bundle/BundleWriter.h"
#include "Calibrate.h"
#include "Driver/TrainingPipeline.h"
#include "GPipe/IR/GPipeDialect.h"
#include "Import/ONNX/ModelImporter.h"
#include "NN/IR/NNDialect.h"
#include "Pipelines/Pipelines.h"
#include "Target/Native/NativeCodegen.h"
#include "Target/StageTarget.h"
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
#include "llvm/Config/llvm-config.h"

#include "gpipe/common/BundleFormat.h"
#include "gpipe/common/Version.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {

// Named so that --help lists it before MLIR's "General options".
cl::OptionCategory gpipeCategory("Compiling an ONNX model (gpipe options)");

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
    cl::desc("Pipeline devices, comma-separated, one stage each: cpu:N (one "
             "core), cpu:A-B (cores A..B), cuda:N; may repeat "
             "(cpu:0,cpu:1,cpu:0). Without it the model is one stage on the "
             "whole host, unpinned (--mode=train for more than one device)"),
    cl::value_desc("LIST"), cl::cat(gpipeCategory));

cl::opt<std::string> scheduleOption(
    "schedule",
    cl::desc("Micro-batch order (--mode=train): gpipe (all forwards, then "
             "all backwards; default) or 1f1b (one forward, one backward "
             "after a warm-up: at most K micro-batches alive per stage)"),
    cl::init("gpipe"), cl::cat(gpipeCategory));

cl::opt<std::string> stagesOption(
    "stages",
    cl::desc("auto (the partitioner balances the stages; default) or "
             "manual:i,j,... (stage 1 starts at layer i, stage 2 at j, ...; "
             "layers as --emit=stages numbers them) (--mode=train)"),
    cl::init("auto"), cl::cat(gpipeCategory));

cl::opt<std::string> deviceProfileOption(
    "device-profile",
    cl::desc("JSON profile of the CPU cores (written by --calibrate) for the "
             "cost model; default: built-in figures (--mode=train)"),
    cl::value_desc("FILE"), cl::cat(gpipeCategory));

cl::opt<std::string> costTableOption(
    "cost-table",
    cl::desc("CSV of measured per-op forward seconds (op,seconds), used "
             "instead of the roofline for the ops it names (--mode=train)"),
    cl::value_desc("FILE"), cl::cat(gpipeCategory));

cl::opt<std::string> reportOption(
    "report",
    cl::desc("Also write an HTML report: the per-stage table and an SVG "
             "timeline of the predicted schedule (--mode=train)"),
    cl::value_desc("FILE.html"), cl::cat(gpipeCategory));

cl::opt<bool> calibrateOption(
    "calibrate",
    cl::desc("Measure this machine's cores (oneDNN sgemm, memory copies) and "
             "write a device profile for --device-profile to -o (no model "
             "input)"),
    cl::init(false), cl::cat(gpipeCategory));

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

/// Inference: the imported nn module lowered to one stage.
LogicalResult lowerToStage(ModuleOp module) {
  PassManager pm(module.getContext());
  gpipe::buildInferencePipeline(pm);
  return pm.run(module);
}

/// Writes `output` ("-" is stdout) through a temporary file renamed into
/// place: a failed run leaves no partial output behind.
int writeText(StringRef output,
              llvm::function_ref<void(llvm::raw_ostream &)> write) {
  llvm::Error err = llvm::writeToOutput(output, [&](llvm::raw_ostream &os) {
    write(os);
    return llvm::Error::success();
  });
  if (err) {
    llvm::errs() << "gpipe-opt: error: cannot write '" << output
                 << "': " << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  return 0;
}

int compileONNX(StringRef input, StringRef output, DialectRegistry &registry) {
  MLIRContext context(registry);
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diag) {
    printDiagnostic(diag);
    return success();
  });
  bool pipelinePhase = emitOption == Emit::Stages ||
                       emitOption == Emit::Autodiff ||
                       emitOption == Emit::Schedule;
  if (pipelinePhase && modeOption != Mode::Train) {
    llvm::errs() << "gpipe-opt: error: --emit="
                 << (emitOption == Emit::Stages     ? "stages"
                     : emitOption == Emit::Autodiff ? "autodiff"
                                                    : "schedule")
                 << " shows a phase of the training pipeline (add "
                    "--mode=train)\n";
    return 1;
  }
  switch (emitOption) {
  case Emit::Stages:
  case Emit::Autodiff:
  case Emit::Schedule:
  case Emit::None:
  case Emit::LLVM:
    if (modeOption != Mode::Train) {
      for (llvm::cl::Option *o : std::initializer_list<llvm::cl::Option *>{
               &lossOption, &microBatchesOption, &recomputeOption,
               &optimizerOption, &lrOption, &momentumOption, &nesterovOption,
               &weightDecayOption, &beta1Option, &beta2Option, &epsOption,
               &scheduleOption, &stagesOption, &deviceProfileOption,
               &costTableOption, &reportOption})
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
    if (modeOption == Mode::Train && scheduleOption != "gpipe" &&
        scheduleOption != "1f1b") {
      llvm::errs() << "gpipe-opt: error: --schedule=" << scheduleOption
                   << " is not a schedule: use gpipe or 1f1b\n";
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
  bool training =
      modeOption == Mode::Train &&
      (emitOption == Emit::None || emitOption == Emit::LLVM || pipelinePhase);
  if (microBatchesOption < 1) {
    llvm::errs() << "gpipe-opt: error: --micro-batches must be at least 1\n";
    return 1;
  }
  std::vector<std::string> devices{"cpu"};
  if (devicesOption.getNumOccurrences()) {
    llvm::Expected<std::vector<gpipe::Device>> parsed =
        gpipe::parseDevices(devicesOption);
    if (!parsed) {
      llvm::errs() << "gpipe-opt: error: --devices=" << devicesOption << ": "
                   << llvm::toString(parsed.takeError()) << "\n";
      return 1;
    }
    devices.clear();
    for (const gpipe::Device &d : *parsed)
      devices.push_back(d.str());
    if (devices.size() > 1 && modeOption != Mode::Train) {
      llvm::errs() << "gpipe-opt: error: --devices=" << devicesOption
                   << ": pipelined inference is not implemented; compile "
                      "inference for one device, or add --mode=train\n";
      return 2;
    }
    for (const gpipe::Device &d : *parsed)
      if (d.kind == gpipe::DeviceKind::Cuda) {
        llvm::errs() << "gpipe-opt: error: --devices=" << devicesOption << ": "
                     << d.str()
                     << ": CUDA stages are not implemented yet; use cpu "
                        "devices\n";
        return 2;
      }
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
  if (training) {
    // Read now: writing the bundle resets the command-line options
    // (emitStageLibrary).
    std::string reportPath = reportOption;
    gpipe::TrainingPipelineOptions t;
    t.loss = lossOption;
    t.devices = devicesOption.getNumOccurrences() ? devicesOption.getValue()
                                                  : std::string("cpu:0");
    t.bundleDevices = devices;
    t.stages = stagesOption;
    t.schedule = scheduleOption;
    t.recompute = recomputeOption;
    t.microBatches = microBatchesOption;
    t.optimizer = optimizerOption;
    t.momentum = momentumOption != 0.0;
    t.nesterov = nesterovOption;
    t.deviceProfile = deviceProfileOption;
    t.costTable = costTableOption;
    gpipe::TrainingStop stop = gpipe::TrainingStop::Lowered;
    if (emitOption == Emit::Stages)
      stop = gpipe::TrainingStop::Stages;
    else if (emitOption == Emit::Autodiff)
      stop = gpipe::TrainingStop::Autodiff;
    else if (emitOption == Emit::Schedule)
      stop = gpipe::TrainingStop::Schedule;
    std::string text;
    llvm::raw_string_ostream phaseOS(text);
    FailureOr<gpipe::TrainingPipelineResult> result =
        gpipe::compileTrainingPipeline(*module, t, stop, phaseOS);
    if (failed(result))
      return 1;
    if (stop != gpipe::TrainingStop::Lowered)
      return writeText(output, [&](llvm::raw_ostream &os) { os << text; });
    if (emitOption == Emit::LLVM) {
      return writeText(output, [&](llvm::raw_ostream &os) {
        for (auto [k, stage] : llvm::enumerate(result->stages)) {
          auto target = gpipe::createStageTarget(devices[k], *stage);
          if (failed(target) || failed((*target)->lower(*stage)))
            return;
          stage->print(os, OpPrintingFlags());
          os << "\n";
        }
      });
    }
    gpipe::BundleOptions bundleOptions;
    bundleOptions.sourceName = llvm::sys::path::filename(input).str();
    bundleOptions.sourcePath = input.str();
    bundleOptions.devices = devices;
    bundleOptions.mode = "train";
    bundleOptions.schedule = std::move(result->schedule);
    gpipe::TrainingOptions &to = bundleOptions.training;
    to.microBatches = microBatchesOption;
    to.loss = lossOption;
    to.optimizer = optimizerOption;
    to.lr = lrOption;
    to.momentum = momentumOption;
    to.nesterov = nesterovOption;
    to.weightDecay = weightDecayOption;
    to.beta1 = beta1Option;
    to.beta2 = beta2Option;
    to.eps = epsOption;
    to.batchSize = batchSizeOption.getNumOccurrences()
                       ? static_cast<int64_t>(batchSizeOption)
                       : 0; // filled from the model
    SmallVector<ModuleOp> stages;
    for (auto &stage : result->stages)
      stages.push_back(*stage);
    if (failed(gpipe::writeBundle(stages, output, bundleOptions)))
      return 1;
    gpipe::printStageReport(*result, llvm::outs());
    if (!reportPath.empty()) {
      auto name = (*module)->getAttrOfType<StringAttr>("gpipe.model_name");
      std::string html = gpipe::stageReportHTML(
          *result, name ? name.getValue() : StringRef("model"));
      if (int rc =
              writeText(reportPath, [&](llvm::raw_ostream &os) { os << html; }))
        return rc;
    }
    return 0;
  }
  if (emitOption == Emit::None || emitOption == Emit::LLVM) {
    if (failed(lowerToStage(*module)))
      return 1;
    if (emitOption == Emit::None) {
      gpipe::BundleOptions bundleOptions;
      bundleOptions.sourceName = llvm::sys::path::filename(input).str();
      bundleOptions.sourcePath = input.str();
      bundleOptions.devices = devices;
      ModuleOp stage = *module;
      return failed(gpipe::writeBundle(stage, output, bundleOptions)) ? 1 : 0;
    }
    auto target = gpipe::createStageTarget(devices.front(), *module);
    if (failed(target) || failed((*target)->lower(*module)))
      return 1;
  }
  return writeText(output, [&](llvm::raw_ostream &os) {
    if (emitOption == Emit::Summary)
      gpipe::printModelSummary(*module, os);
    else
      module->print(os, OpPrintingFlags());
  });
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
  gpipe::registerGPipePipelines();
  // gpipe's options first: LLVM's code generation options (registered when
  // LLVM loads) are listed by --help-hidden only, as mlir-opt hides them.
  for (auto &[name, option] : cl::getRegisteredOptions())
    if (!llvm::is_contained(option->Categories, &gpipeCategory) &&
        !name.starts_with("help") && name != "version" &&
        option->getOptionHiddenFlag() == cl::NotHidden)
      option->setHiddenFlag(cl::Hidden);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "gpipe-opt " << gpipe::kVersion << " (bundle format "
       << gpipe::kBundleFormatVersion << "), on MLIR/LLVM "
       << LLVM_VERSION_STRING << "\n";
  });

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
      "      [--devices=cpu:0,cpu:1 --schedule=gpipe|1f1b --recompute=...]\n"
      "      compile a training bundle for gpipe-run --train, pipelined "
      "across\n      the devices; prints the per-stage table and the "
      "predicted step\n"
      "  gpipe-opt --calibrate -o profile.json\n"
      "      measure this machine's cores for --device-profile\n"
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
  if (calibrateOption) {
    if (output == "-") {
      llvm::errs() << "gpipe-opt: error: --calibrate writes a profile: name "
                      "it with -o profile.json\n";
      return 1;
    }
    std::string profile = gpipe::calibrateCpu(llvm::errs());
    return writeText(output, [&](llvm::raw_ostream &os) { os << profile; });
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
