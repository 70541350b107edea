//===- gpipe-opt.cpp - The gpipe compiler driver --------------------------===//
//
// Two modes, chosen by the input:
//   gpipe-opt model.onnx --emit=nn [--batch-size=N]   import and print
//   gpipe-opt model.onnx -o model.gpipe               compile a bundle
//   gpipe-opt file.mlir --<pass>...                   like mlir-opt
// The main parses flags: an ONNX input goes to the driver (compileModel,
// lib/Driver), MLIR input to MlirOptMain.
//
//===----------------------------------------------------------------------===//
#include "Analysis/CostModel.h"
#include "Analysis/Planner/ScheduleGenerator.h"
#include "Calibrate.h"
#include "Driver/CompileModel.h"
#include "Import/ONNX/ModelImporter.h"
#include "Pipelines/Pipelines.h"
#include "Transforms/Passes.h"

#include "gpipe/common/BundleFormat.h"
#include "gpipe/common/Version.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include <set>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

// --help lists categories by name: these sort before MLIR's "General
// options", in the order a user fills them in.
cl::OptionCategory inputCategory(
    "Compiling an ONNX model (1/4): the model",
    "What is read from the .onnx file and how its inputs are shaped.");
cl::OptionCategory trainingCategory(
    "Compiling an ONNX model (2/4): training",
    "A training flag makes a training bundle (--mode=train is implied).");
cl::OptionCategory pipelineCategory(
    "Compiling an ONNX model (3/4): the pipeline",
    "How the model is split into stages and placed on devices and ranks.");
cl::OptionCategory outputCategory(
    "Compiling an ONNX model (4/4): output",
    "What is written: a bundle with -o FILE.gpipe (default), or one phase's "
    "IR with --emit.");
const cl::OptionCategory *const gpipeCategories[] = {
    &inputCategory, &trainingCategory, &pipelineCategory, &outputCategory};

using gpipe::CompileOutput;

cl::opt<CompileOutput> emitOption(
    "emit", cl::desc("Stop after a phase and print its IR (ONNX input)"),
    cl::init(CompileOutput::Bundle), cl::cat(outputCategory),
    cl::values(clEnumValN(CompileOutput::NN, "nn",
                          "the imported model in the nn dialect"),
               clEnumValN(CompileOutput::Summary, "summary",
                          "inputs, outputs, parameters and per-op FLOPs of the "
                          "imported model"),
               clEnumValN(CompileOutput::Stages, "stages",
                          "after partitioning into gpipe.stage regions"),
               clEnumValN(CompileOutput::Autodiff, "autodiff",
                          "after per-stage autodiff"),
               clEnumValN(CompileOutput::Schedule, "schedule",
                          "after the static micro-batch schedule"),
               clEnumValN(CompileOutput::Plans, "plans",
                          "the plans weighed for the cores of --devices: "
                          "stages, micro-batches, schedule, recompute, "
                          "predicted step and memory"),
               clEnumValN(CompileOutput::LLVM, "llvm",
                          "the LLVM dialect of each stage")));

enum class Mode { Infer, Train };

cl::opt<Mode> modeOption(
    "mode",
    cl::desc("What the bundle does (ONNX input with -o); default: train "
             "when a training flag is given (--micro-batches, --loss, "
             "--optimizer, --lr, --devices with several devices, ...), "
             "infer otherwise"),
    cl::init(Mode::Infer), cl::cat(trainingCategory),
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
    cl::init("cross-entropy"), cl::cat(trainingCategory));

cl::opt<int64_t> ignoreIndexOption(
    "ignore-index",
    cl::desc("--loss=cross-entropy: labels equal to this value count for "
             "nothing (padding tokens); the loss is the mean over the others "
             "(default -100, as PyTorch)"),
    cl::init(-100), cl::cat(trainingCategory));

cl::opt<int64_t> classAxisOption(
    "class-axis",
    cl::desc("--loss=cross-entropy: the axis of the logits that holds the "
             "classes: -1, the last (default: [N, C], [B, T, V]), or 1 for "
             "[N, C, H, W] segmentation logits with labels [N, H, W], as "
             "F.cross_entropy reads them"),
    cl::init(-1), cl::cat(trainingCategory));

cl::opt<int64_t> microBatchesOption(
    "micro-batches",
    cl::desc("Split each training batch into M micro-batches whose "
             "gradients are accumulated before one optimizer step "
             "(--mode=train; default 1)"),
    cl::init(1), cl::cat(trainingCategory));

cl::opt<int64_t> dataParallelOption(
    "data-parallel",
    cl::desc("Replicate the pipeline D times (--mode=train): K x D MPI ranks, "
             "replica r of a stage on rank r x (ranks of one replica) + its "
             "rank; each replica trains on --batch-size rows of a global "
             "batch of D x --batch-size, gradients summed over the replicas "
             "(docs/distributed.md; default 1)"),
    cl::value_desc("D"), cl::init(1), cl::cat(pipelineCategory));

cl::opt<std::string> recomputeOption(
    "recompute",
    cl::desc("What each stage's forward keeps for its backward (--mode=train): "
             "never (the activations; fastest, most memory), always (only the "
             "stage input; the backward runs the forward again) or "
             "except-last (always, but never on the last stage, whose "
             "backward follows its forward at once; on one stage: never) or "
             "auto (each stage recomputes only if keeping its activations "
             "does not fit its device's memory, --memory-per-device). "
             "Default never"),
    cl::init("never"), cl::cat(pipelineCategory));

cl::opt<std::string> memoryPerDeviceOption(
    "memory-per-device",
    cl::desc("The memory of each device, e.g. 512MiB, 4GiB (K, M, G, T: "
             "powers of 1024): every stage's memory plan, with 64 MiB and "
             "1/32 of the device kept for the runtime around it, must fit; the "
             "partitioner, the plan "
             "search and --recompute=auto respect it (--mode=train). "
             "Default: the device profile's (16 GiB for a CPU device "
             "without one)"),
    cl::value_desc("SIZE"), cl::cat(pipelineCategory));

cl::opt<std::string> devicesOption(
    "devices",
    cl::desc("Pipeline devices, comma-separated, one stage each: cpu:N (one "
             "core), cpu:A-B (cores A..B), cuda:N; may repeat "
             "(cpu:0,cpu:1,cpu:0). A prefix rN: puts the stage in rank N "
             "of an mpirun job (r0:cpu:0,r1:cpu:0; docs/distributed.md). "
             "Without it the model is one stage on the whole host, unpinned "
             "(--mode=train for more than one device)"),
    cl::value_desc("LIST"), cl::cat(pipelineCategory));

cl::opt<std::string> scheduleOption(
    "schedule",
    cl::desc("Micro-batch order (--mode=train): gpipe (all forwards, then "
             "all backwards; default), 1f1b (one forward, one backward "
             "after a warm-up: at most K micro-batches alive per stage), "
             "zb-h1 (1f1b with each backward in two parts, the weights' "
             "gradients filling the drain: K alive on every stage), "
             "interleaved-1f1b (v stages on each device in turns, the "
             "devices listed v times over or --virtual-stages=v: the fill "
             "and drain 1/v as long; micro-batches a multiple of the "
             "devices), zb-v (zb-h1's split backward over two stages on "
             "each device laid out as a V, the devices listed forth and "
             "back or --virtual-stages=2: the first and the last stage on "
             "one device) or auto (the one the cost model predicts the "
             "fastest for the rest of the plan)"),
    cl::init("gpipe"), cl::cat(pipelineCategory));

cl::opt<int64_t> virtualStagesOption(
    "virtual-stages",
    cl::desc("v stages on each device of --devices (--mode=train): the "
             "devices listed v times over, stage s on the device s mod K "
             "(with --schedule=zb-v, v = 2: forth and back, stage s on "
             "device 2K - 1 - s from K on), trained with "
             "--schedule=interleaved-1f1b unless --schedule says otherwise "
             "(default 1)"),
    cl::value_desc("v"), cl::init(1), cl::cat(pipelineCategory));

cl::opt<std::string> planOption(
    "plan",
    cl::desc("auto: the compiler weighs the plans for the CPU cores "
             "--devices names (stages on groups of cores, micro-batches "
             "dividing the batch, schedule, recompute) with its cost model "
             "and compiles the fastest (--emit=plans lists them); given: "
             "--devices, --micro-batches, --schedule and --recompute as "
             "written. Default: auto when --devices names CPU cores and "
             "none of --micro-batches, --schedule, --recompute, --stages "
             "and --data-parallel is given (and the batch is known), else "
             "given (--mode=train)"),
    cl::init("given"), cl::cat(pipelineCategory));

cl::opt<std::string> stagesOption(
    "stages",
    cl::desc("auto (the partitioner balances the stages; default) or "
             "manual:i,j,... (stage 1 starts at layer i, stage 2 at j, ...; "
             "layers as --emit=stages numbers them) (--mode=train)"),
    cl::init("auto"), cl::cat(pipelineCategory));

cl::opt<std::string> deviceProfileOption(
    "device-profile",
    cl::desc("JSON profiles for the cost model, comma-separated: of the "
             "CPU cores (written by --calibrate) and of the GPUs (written "
             "by gpipe-run --calibrate=cuda:N on the GPU's machine); "
             "default: built-in figures (--mode=train)"),
    cl::value_desc("FILE[,FILE]"), cl::cat(pipelineCategory));

cl::opt<std::string> costTableOption(
    "cost-table",
    cl::desc("CSV of measured per-op seconds, as gpipe-run --profile-ops "
             "writes it (op,forward_seconds[,backward_seconds[,micro_batch_"
             "rows]]; scaled to the micro-batch compiled), used instead of "
             "the roofline for the ops it names (--mode=train)"),
    cl::value_desc("FILE"), cl::cat(pipelineCategory));

cl::opt<std::string> cudaArchOption(
    "cuda-arch",
    cl::desc("GPU architecture of the stages on cuda:N devices: their "
             "kernels are compiled to PTX for it, and to a cubin when "
             "ptxas (CUDA toolkit) is found (default sm_80: A100; sm_90: "
             "H100)"),
    cl::value_desc("sm_NN"), cl::init("sm_80"), cl::cat(pipelineCategory));

cl::opt<std::string> precisionOption(
    "precision",
    cl::desc("fp32 (default) or bf16: the products of matrices (Gemm, "
             "MatMul, convolutions and their gradients) multiply bfloat16 "
             "operands and sum in float32, as torch.autocast's bfloat16 "
             "does; other ops, activations, parameters, gradients and the "
             "optimizer stay float32 (docs/training.md); with --calibrate, "
             "fp32 times the float32 kernels alone"),
    cl::value_desc("fp32|bf16"), cl::init("fp32"), cl::cat(pipelineCategory));

cl::opt<std::string> targetCpuOption(
    "target-cpu",
    cl::desc("CPU the stages' native code is generated for: host (this "
             "machine's, the default), a portable x86-64 level (x86-64, "
             "x86-64-v2, x86-64-v3: AVX2, x86-64-v4: AVX-512) or a CPU "
             "of LLVM's (znver4, sapphirerapids); gpipe-run refuses the "
             "bundle on a CPU without the features it needs"),
    cl::value_desc("host|NAME"), cl::init("host"), cl::cat(pipelineCategory));

cl::opt<std::string> targetFeaturesOption(
    "target-features",
    cl::desc("Changes to the target CPU's features, LLVM's names "
             "comma-separated (+avx512f,-avx512fp16)"),
    cl::value_desc("+NAME,-NAME"), cl::cat(pipelineCategory));

cl::opt<std::string> reportOption(
    "report",
    cl::desc("Also write an HTML report: the per-stage table and an SVG "
             "timeline of the predicted schedule (--mode=train)"),
    cl::value_desc("FILE.html"), cl::cat(outputCategory));

cl::opt<bool> calibrateOption(
    "calibrate",
    cl::desc("Measure this machine's cores (oneDNN sgemm, memory copies) and "
             "write a device profile for --device-profile to -o (no model "
             "input)"),
    cl::init(false), cl::cat(pipelineCategory));

cl::opt<std::string>
    optimizerOption("optimizer",
                    cl::desc("sgd (momentum, Nesterov, weight decay), adam "
                             "(L2 weight decay) or adamw (decoupled weight "
                             "decay) (--mode=train)"),
                    cl::init("sgd"), cl::cat(trainingCategory));
cl::opt<double> beta1Option("beta1", cl::desc("Adam beta1 (default 0.9)"),
                            cl::init(0.9), cl::cat(trainingCategory));
cl::opt<double> beta2Option("beta2", cl::desc("Adam beta2 (default 0.999)"),
                            cl::init(0.999), cl::cat(trainingCategory));
cl::opt<double> epsOption("eps", cl::desc("Adam epsilon (default 1e-8)"),
                          cl::init(1e-8), cl::cat(trainingCategory));
cl::opt<double> lrOption("lr", cl::desc("Learning rate (default 0.01)"),
                         cl::init(0.01), cl::cat(trainingCategory));
cl::opt<double> momentumOption("momentum", cl::desc("SGD momentum (default 0)"),
                               cl::init(0.0), cl::cat(trainingCategory));
cl::opt<bool> nesterovOption("nesterov", cl::desc("Nesterov momentum"),
                             cl::init(false), cl::cat(trainingCategory));
cl::opt<double> weightDecayOption("weight-decay",
                                  cl::desc("L2 weight decay (default 0)"),
                                  cl::init(0.0), cl::cat(trainingCategory));

cl::opt<int64_t> batchSizeOption(
    "batch-size",
    cl::desc("Batch size N: replaces the symbolic (or first) dimension of "
             "every graph input (ONNX input; default: the model's static "
             "batch)"),
    cl::init(0), cl::cat(inputCategory));

cl::list<std::string> batchAxisOption(
    "batch-axis",
    cl::desc("The dimension of the graph inputs that carries the batch: K "
             "for every input, NAME:K for one (a sequence-first [T, B] "
             "input: 1; default: the symbolic dimension, the one named like "
             "'batch' of several, else 0; ONNX input; repeatable)"),
    cl::value_desc("K|NAME:K,..."), cl::CommaSeparated, cl::cat(inputCategory));

cl::list<std::string> constInputOption(
    "const-input",
    cl::desc("NAME=FILE: make graph input NAME a compile-time constant with "
             "the value of FILE, a serialized ONNX TensorProto (.pb); for "
             "inputs that must be static, like a Reshape's shape (ONNX "
             "input; repeatable)"),
    cl::value_desc("NAME=FILE"), cl::cat(inputCategory));

cl::list<std::string> freezeOption(
    "freeze",
    cl::desc("Floating-point initializers not to train, a list of names or "
             "glob patterns (*, ?, [...]): buffers such as a position table "
             "that ONNX stores like parameters (see --emit=summary; "
             "repeatable)"),
    cl::value_desc("NAME,..."), cl::CommaSeparated, cl::cat(inputCategory));

cl::list<std::string> trainableOption(
    "trainable",
    cl::desc("Train only the floating-point initializers these names or "
             "glob patterns match; the others are frozen (repeatable)"),
    cl::value_desc("NAME,..."), cl::CommaSeparated, cl::cat(inputCategory));

cl::opt<bool> printOnnxOps(
    "print-onnx-ops",
    cl::desc("Print the ONNX op types the importer accepts, one per line "
             "(domain-qualified outside the default domain), and exit"),
    cl::init(false), cl::cat(inputCategory));

bool isONNXFile(StringRef path) {
  return llvm::sys::path::extension(path).equals_insensitive(".onnx");
}

/// The flags, checked for what they combine with, as the driver's options.
/// Returns an exit code when they do not combine.
int compileOptions(StringRef input, StringRef output,
                   gpipe::CompileOptions &o) {
  o.input = input.str();
  o.output = output.str();
  o.emit = emitOption;
  // What only training uses implies --mode=train; with --mode=infer given,
  // each such flag is named in one error.
  std::vector<std::string> trainingFlags;
  for (cl::Option *flag :
       std::initializer_list<cl::Option *>{&lossOption,
                                           &ignoreIndexOption,
                                           &classAxisOption,
                                           &microBatchesOption,
                                           &dataParallelOption,
                                           &recomputeOption,
                                           &memoryPerDeviceOption,
                                           &optimizerOption,
                                           &lrOption,
                                           &momentumOption,
                                           &nesterovOption,
                                           &weightDecayOption,
                                           &beta1Option,
                                           &beta2Option,
                                           &epsOption,
                                           &scheduleOption,
                                           &virtualStagesOption,
                                           &stagesOption,
                                           &planOption,
                                           &deviceProfileOption,
                                           &costTableOption,
                                           &reportOption})
    if (flag->getNumOccurrences())
      trainingFlags.push_back("--" + flag->ArgStr.str());
  if (devicesOption.getNumOccurrences() &&
      StringRef(devicesOption).contains(','))
    trainingFlags.push_back(
        "--devices with several devices (--mode=infer for pipelined "
        "inference)");
  if (o.emit == CompileOutput::Stages || o.emit == CompileOutput::Autodiff ||
      o.emit == CompileOutput::Schedule || o.emit == CompileOutput::Plans)
    trainingFlags.push_back("--emit=" + compileOutputName(o.emit).str());
  bool explicitMode = modeOption.getNumOccurrences() > 0;
  o.train = explicitMode ? modeOption == Mode::Train : !trainingFlags.empty();
  // --mode=infer with devices: a stage's pace is predicted, and with
  // several devices the model is cut for pipelined inference: the
  // partition's flags shape both (--stages: a cut, several devices).
  if (explicitMode && !o.train && devicesOption.getNumOccurrences()) {
    bool several = StringRef(devicesOption).contains(',');
    std::set<std::string> pipelineFlags;
    for (cl::Option *flag : std::initializer_list<cl::Option *>{
             &memoryPerDeviceOption, &deviceProfileOption, &costTableOption})
      pipelineFlags.insert("--" + flag->ArgStr.str());
    pipelineFlags.insert("--" + planOption.ArgStr.str());
    pipelineFlags.insert("--emit=plans");
    if (several)
      pipelineFlags.insert("--" + stagesOption.ArgStr.str());
    llvm::erase_if(trainingFlags, [&](const std::string &f) {
      return pipelineFlags.count(f) ||
             StringRef(f).starts_with("--devices with several");
    });
  }
  if (explicitMode && !o.train && o.emit != CompileOutput::NN &&
      o.emit != CompileOutput::Summary && !trainingFlags.empty()) {
    llvm::errs() << "gpipe-opt: error: --mode=infer, but ";
    for (size_t i = 0; i < trainingFlags.size(); ++i)
      llvm::errs() << (i == 0 ? "" : ", ") << trainingFlags[i];
    llvm::errs() << (trainingFlags.size() == 1 ? " applies" : " apply")
                 << " to training bundles only: drop "
                 << (trainingFlags.size() == 1 ? "it" : "them")
                 << " or --mode=infer\n";
    return 1;
  }
  if (batchSizeOption.getNumOccurrences())
    o.batchSize = batchSizeOption;
  if (devicesOption.getNumOccurrences())
    o.devices = devicesOption;
  if (virtualStagesOption.getNumOccurrences()) {
    if (virtualStagesOption < 1 || virtualStagesOption > 64 || !o.devices) {
      llvm::errs() << "gpipe-opt: error: --virtual-stages="
                   << virtualStagesOption
                   << " needs --devices and a count from 1 to 64\n";
      return 1;
    }
    // The devices listed v times over, forth and back for a V layout.
    std::optional<gpipe::ScheduleKind> kind =
        gpipe::parseScheduleKind(scheduleOption);
    gpipe::StageLayout layout = kind ? gpipe::scheduleKindInfo(*kind).layout
                                     : gpipe::StageLayout::Looped;
    if (layout == gpipe::StageLayout::V && virtualStagesOption != 2) {
      llvm::errs() << "gpipe-opt: error: --schedule=" << scheduleOption
                   << " runs two stages on each device: --virtual-stages=2, "
                      "not "
                   << virtualStagesOption << "\n";
      return 1;
    }
    llvm::SmallVector<std::string> list;
    for (StringRef d : llvm::split(*o.devices, ','))
      list.push_back(d.str());
    *o.devices = gpipe::layDevices(list, virtualStagesOption, layout);
  }
  for (const std::string &binding : constInputOption) {
    auto [name, file] = StringRef(binding).split('=');
    if (name.empty() || file.empty()) {
      llvm::errs() << "gpipe-opt: error: --const-input expects NAME=FILE, got '"
                   << binding << "'\n";
      return 1;
    }
    o.constInputFiles.emplace_back(name.str(), file.str());
  }
  o.freeze.assign(freezeOption.begin(), freezeOption.end());
  for (const std::string &entry : batchAxisOption) {
    llvm::StringRef text(entry), name, number = text;
    size_t colon = text.rfind(':');
    if (colon != llvm::StringRef::npos) {
      name = text.take_front(colon);
      number = text.drop_front(colon + 1);
    }
    int64_t axis;
    if (number.getAsInteger(10, axis) ||
        (colon != llvm::StringRef::npos && name.empty())) {
      llvm::errs() << "gpipe-opt: error: --batch-axis=" << entry
                   << " is not K or NAME:K (an input's batch dimension)\n";
      return 1;
    }
    o.batchAxes.emplace_back(name.str(), axis);
  }
  o.trainable.assign(trainableOption.begin(), trainableOption.end());
  gpipe::TrainingOptions &t = o.training;
  t.microBatches = microBatchesOption;
  t.dataParallel = dataParallelOption;
  if (t.dataParallel < 1 || t.dataParallel > 4096) {
    llvm::errs() << "gpipe-opt: error: --data-parallel=" << t.dataParallel
                 << " is out of range (1..4096)\n";
    return 1;
  }
  t.loss = lossOption;
  t.ignoreIndex = ignoreIndexOption;
  t.classAxis = classAxisOption;
  t.optimizer = optimizerOption;
  t.lr = lrOption;
  t.momentum = momentumOption;
  t.nesterov = nesterovOption;
  t.weightDecay = weightDecayOption;
  t.beta1 = beta1Option;
  t.beta2 = beta2Option;
  t.eps = epsOption;
  o.stages = stagesOption;
  o.plan = planOption;
  std::initializer_list<cl::Option *> planFlags{
      &microBatchesOption, &scheduleOption, &virtualStagesOption,
      &recomputeOption,    &stagesOption,   &dataParallelOption};
  bool planGiven = llvm::any_of(
      planFlags, [](cl::Option *flag) { return flag->getNumOccurrences(); });
  if (o.plan == "auto")
    for (cl::Option *flag : planFlags)
      if (flag->getNumOccurrences()) {
        llvm::errs() << "gpipe-opt: error: --plan=auto chooses --"
                     << flag->ArgStr << " (drop it, or compile the plan "
                     << "you give with --plan=given)\n";
        return 1;
      }
  // The devices alone: the compiler chooses the rest where it can.
  if (!planOption.getNumOccurrences() && !planGiven &&
      devicesOption.getNumOccurrences())
    o.autoPlanWherePossible = true;
  o.schedule = scheduleOption;
  if (virtualStagesOption > 1 && !scheduleOption.getNumOccurrences())
    o.schedule = "interleaved-1f1b";
  o.recompute = recomputeOption;
  if (memoryPerDeviceOption.getNumOccurrences()) {
    std::optional<int64_t> bytes =
        gpipe::parseMemorySize(memoryPerDeviceOption);
    if (!bytes) {
      llvm::errs() << "gpipe-opt: error: --memory-per-device="
                   << memoryPerDeviceOption
                   << " is not a memory size (write e.g. 512MiB or 4GiB)\n";
      return 1;
    }
    if (static_cast<double>(*bytes) <= gpipe::runtimeReserveBytes(*bytes)) {
      llvm::errs() << "gpipe-opt: error: --memory-per-device="
                   << memoryPerDeviceOption
                   << " leaves nothing for a stage: the runtime keeps 64 MiB "
                      "and 1/32 of each device's memory\n";
      return 1;
    }
    o.memoryPerDevice = *bytes;
  }
  o.deviceProfile = deviceProfileOption;
  o.costTable = costTableOption;
  o.cudaArch = cudaArchOption;
  o.targetCpu = targetCpuOption;
  o.precision = precisionOption;
  o.targetFeatures = targetFeaturesOption;
  o.reportPath = reportOption;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  DialectRegistry registry;
  gpipe::registerONNXImportDialects(registry);
  registry.insert<affine::AffineDialect, arith::ArithDialect,
                  cf::ControlFlowDialect, linalg::LinalgDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                  scf::SCFDialect, tensor::TensorDialect>();
  registerLinalgPasses();
  registerTransformsPasses();
  gpipe::registerGPipePasses();
  gpipe::registerGPipePipelines();
  // gpipe's options first: LLVM's code generation options (registered when
  // LLVM loads) are listed by --help-hidden only, as mlir-opt hides them.
  for (auto &[name, option] : cl::getRegisteredOptions())
    if (llvm::none_of(option->Categories,
                      [](const cl::OptionCategory *category) {
                        return llvm::is_contained(gpipeCategories, category);
                      }) &&
        !name.starts_with("help") && name != "version" &&
        option->getOptionHiddenFlag() == cl::NotHidden)
      option->setHiddenFlag(cl::Hidden);
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << "gpipe-opt " << gpipe::kVersion << " (writes bundle format "
       << gpipe::kBundleFormatVersion << ")\n"
       << "ONNX models of opsets " << gpipe::kMinONNXOpset << "-"
       << gpipe::kMaxONNXOpset << ", read with " << gpipe::protobufVersion()
       << "\n"
       << "MLIR/LLVM " << LLVM_VERSION_STRING << " (x86-64 code generation)\n"
       << gpipe::onednnVersion() << " (--calibrate)\n";
  });

  std::string overview =
      "gpipe-opt: the gpipe compiler\n\n"
      "  gpipe-opt model.onnx --emit=nn [--batch-size=N] [-o out.mlir]\n"
      "      import an ONNX model (opsets ";
  overview += std::to_string(gpipe::kMinONNXOpset) + "-" +
              std::to_string(gpipe::kMaxONNXOpset);
  overview +=
      ") and print it in the nn dialect\n"
      "  gpipe-opt model.onnx -o model.gpipe [--mode=infer] [--batch-size=N]\n"
      "      compile an inference bundle for gpipe-run --infer\n"
      "  gpipe-opt model.onnx --devices=cpu:0,cpu:1 --micro-batches=M "
      "-o model.gpipe\n"
      "      [--batch-size=B] [--loss=...] [--optimizer=sgd|adam|adamw]\n"
      "      [--schedule=gpipe|1f1b|zb-h1|interleaved-1f1b|zb-v|auto] "
      "[--virtual-stages=v] [--recompute=...]\n"
      "      compile a training bundle for gpipe-run --train (any training "
      "flag\n      implies --mode=train), pipelined across the devices; "
      "prints the\n      training configuration, the per-stage table and "
      "the predicted step\n"
      "  gpipe-opt --calibrate -o profile.json\n"
      "      measure this machine's cores for --device-profile\n"
      "  gpipe-opt file.mlir [--pass...] [--split-input-file] "
      "[--verify-diagnostics]\n"
      "      run passes on MLIR input, like mlir-opt\n";
  auto [input, output] =
      registerAndParseCLIOptions(argc, argv, overview, registry);

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
    std::string profile;
    try {
      // --precision=fp32 given: the float32 kernels alone (quicker);
      // otherwise the bfloat16 products too.
      bool fp32Only =
          precisionOption.getNumOccurrences() > 0 && precisionOption == "fp32";
      profile = gpipe::calibrateCpu(registry, llvm::errs(), !fp32Only);
    } catch (const std::exception &e) {
      llvm::errs() << "gpipe-opt: error: --calibrate: " << e.what() << "\n";
      return 1;
    }
    if (profile.empty())
      return 0; // another rank of an mpirun job: rank 0 writes
    if (llvm::Error err =
            llvm::writeToOutput(output, [&](llvm::raw_ostream &os) {
              os << profile;
              return llvm::Error::success();
            })) {
      llvm::errs() << "gpipe-opt: error: cannot write '" << output
                   << "': " << llvm::toString(std::move(err)) << "\n";
      return 1;
    }
    return 0;
  }
  if (isONNXFile(input)) {
    gpipe::CompileOptions options;
    if (int rc = compileOptions(input, output, options))
      return rc;
    return gpipe::compileModel(options, registry);
  }
  if (emitOption.getNumOccurrences() || batchSizeOption.getNumOccurrences() ||
      constInputOption.getNumOccurrences() ||
      batchAxisOption.getNumOccurrences() || freezeOption.getNumOccurrences() ||
      trainableOption.getNumOccurrences()) {
    llvm::errs() << "gpipe-opt: error: --emit, --batch-size, --batch-axis, "
                    "--const-input, --freeze and --trainable apply to ONNX "
                    "input (a .onnx file); '"
                 << input << "' is read as MLIR\n";
    return 1;
  }
  return asMainReturnCode(MlirOptMain(argc, argv, input, output, registry));
}
