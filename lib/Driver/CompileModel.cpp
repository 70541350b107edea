//===- CompileModel.cpp - From an ONNX file to a bundle or IR -------------===//

#include "Driver/CompileModel.h"
#include "Analysis/CostModel.h"
#include "Analysis/ModelSummary.h"
#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/ScheduleGenerator.h"
#include "Driver/InferencePipeline.h"
#include "Driver/PlanSearch.h"
#include "Driver/TrainingPipeline.h"
#include "GPipe/IR/GPipeOps.h"
#include "Import/ONNX/ModelImporter.h"
#include "NN/IR/NNOps.h"
#include "Pipelines/Pipelines.h"
#include "Target/Native/NativeCodegen.h"
#include "Target/StageTarget.h"
#include "gpipe/common/DeviceList.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <set>
#include <thread>

using namespace mlir;

namespace gpipe {

namespace {

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

int error(const llvm::Twine &message, int code = 1) {
  llvm::errs() << "gpipe-opt: error: " << message << "\n";
  return code;
}

bool isTrainingPhase(CompileOutput emit) {
  return emit == CompileOutput::Stages || emit == CompileOutput::Autodiff ||
         emit == CompileOutput::Schedule || emit == CompileOutput::Plans;
}

/// The training the bundle does, defaults included, as one line.
void printTrainingConfiguration(const CompileOptions &o,
                                llvm::raw_ostream &os) {
  const TrainingOptions &t = o.training;
  auto num = [](double v) { return llvm::format("%g", v); };
  os << "training: loss " << t.loss;
  if (t.loss == "cross-entropy" && t.ignoreIndex != -100)
    os << " (ignore index " << t.ignoreIndex << ")";
  if (t.loss == "cross-entropy" && t.classAxis != -1)
    os << " (classes on axis " << t.classAxis << ")";
  os << ", optimizer " << t.optimizer << " (lr " << num(t.lr);
  if (t.optimizer == "sgd")
    os << ", momentum " << num(t.momentum) << (t.nesterov ? " Nesterov" : "");
  else
    os << ", betas " << num(t.beta1) << " " << num(t.beta2) << ", eps "
       << num(t.eps);
  os << ", weight decay " << num(t.weightDecay) << "), batch ";
  const std::optional<int64_t> &batch = o.batchSize;
  if (batch)
    os << *batch;
  else
    os << "of the model";
  if (t.microBatches > 1 && batch)
    os << " in " << t.microBatches << " micro-batches of "
       << *batch / t.microBatches;
  if (t.dataParallel > 1)
    os << " per replica x " << t.dataParallel << " replicas";
  os << ", schedule " << o.schedule << ", recompute " << o.recompute
     << " (gpipe-opt --help: the flags that change them)\n";
}

/// What is wrong with the options, before the model is compiled: every
/// problem, so that one run names them all.
std::vector<std::string> validate(const CompileOptions &o) {
  std::vector<std::string> problems;
  if (isTrainingPhase(o.emit) && o.emit != CompileOutput::Plans && !o.train)
    problems.push_back("--emit=" + compileOutputName(o.emit).str() +
                       " shows a phase of the training pipeline (add "
                       "--mode=train)");
  if (o.precision != "fp32" && o.precision != "bf16")
    problems.push_back("--precision=" + o.precision +
                       " is not a precision: use fp32 or bf16 (products of "
                       "matrices in bfloat16, float32 sums and weights)");
  if (o.emit == CompileOutput::NN || o.emit == CompileOutput::Summary)
    return problems;
  if (o.train && !parseRecomputePolicy(o.recompute))
    problems.push_back("--recompute=" + o.recompute +
                       " is not a recompute mode: use never, always, "
                       "except-last or auto");
  if (o.train && o.schedule != "auto" && !parseScheduleKind(o.schedule))
    problems.push_back("--schedule=" + o.schedule + " is not a schedule: use " +
                       scheduleKindNames() + ", or auto");
  const std::string &opt = o.training.optimizer;
  if (o.train && opt != "sgd" && opt != "adam" && opt != "adamw")
    problems.push_back("--optimizer=" + opt +
                       " is not an optimizer: use sgd, adam or adamw");
  if (o.plan != "given" && o.plan != "auto")
    problems.push_back("--plan=" + o.plan +
                       " is not a plan: use auto (the fastest plan predicted "
                       "for the cores of --devices) or given");
  if (o.train && o.training.microBatches < 1)
    problems.push_back("--micro-batches must be at least 1");
  if (o.emit == CompileOutput::Bundle && o.output == "-")
    problems.push_back("name the bundle to write with -o model.gpipe (or "
                       "pass --emit=nn to print the IR)");
  return problems;
}

/// Prints `problems` as one error (one per line when several); returns
/// the exit code.
int errors(const std::vector<std::string> &problems) {
  if (problems.size() == 1)
    return error(problems.front());
  llvm::errs() << "gpipe-opt: error: " << problems.size()
               << " problems with the flags:\n";
  for (const std::string &p : problems)
    llvm::errs() << "  " << p << "\n";
  return 1;
}

/// The stage devices as the bundle names them ("cpu": the whole host), and
/// the MPI rank of each stage: a device may be prefixed `rN:` (rank N of
/// an mpirun job; docs/distributed.md); `stripped` is the list without
/// the prefixes, for the partitioner.
int parseStageDevices(const CompileOptions &o,
                      std::vector<std::string> &devices,
                      std::vector<int64_t> &ranks, std::string &stripped) {
  devices = {"cpu"};
  ranks.clear();
  if (!o.devices)
    return 0;
  const std::string &flag = *o.devices;
  SmallVector<StringRef> items;
  StringRef(flag).split(items, ',');
  bool anyRank = false;
  std::vector<std::string> plain;
  for (StringRef item : items) {
    int64_t rank = 0;
    if (item.size() > 1 && item[0] == 'r' && llvm::isDigit(item[1])) {
      auto [prefix, rest] = item.split(':');
      if (prefix.drop_front().getAsInteger(10, rank) || rank > 4095 ||
          rest.empty())
        return error("--devices=" + flag + ": '" + item.str() +
                     "': a rank prefix is rN: followed by a device (r1:cpu:0)");
      item = rest;
      anyRank = true;
    }
    ranks.push_back(rank);
    plain.push_back(item.str());
  }
  stripped = llvm::join(plain, ",");
  llvm::Expected<std::vector<Device>> parsed = parseDevices(stripped);
  if (!parsed)
    return error("--devices=" + flag + ": " +
                 llvm::toString(parsed.takeError()));
  devices.clear();
  for (const Device &d : *parsed)
    devices.push_back(d.str());
  if (!anyRank) {
    ranks.clear();
    return 0;
  }
  if (ranks.size() != devices.size())
    return error("--devices=" + flag +
                 ": a rank prefix needs one device "
                 "per stage (cpu:N or cpu:A-B, not a list)");
  // Every rank from 0 to the largest has a stage.
  int64_t count = *std::max_element(ranks.begin(), ranks.end()) + 1;
  for (int64_t r = 0; r < count; ++r)
    if (std::find(ranks.begin(), ranks.end(), r) == ranks.end())
      return error("--devices=" + flag + ": rank " + std::to_string(r) +
                   " has no stage (number the ranks 0.." +
                   std::to_string(count - 1) + " without gaps)");
  // One stage per device: auto, their count, or the cuts between them.
  llvm::StringRef stages(o.stages);
  bool cuts = stages.consume_front("manual:") &&
              static_cast<size_t>(stages.count(',')) + 2 == devices.size();
  if (o.stages != "auto" && o.stages != std::to_string(devices.size()) && !cuts)
    return error("--devices=" + flag +
                 ": with rank prefixes every device is one stage; leave out "
                 "--stages or give its " +
                 std::to_string(devices.size() - 1) +
                 " cut(s) (--stages=manual:i,...)");
  return 0;
}

int readConstInputs(const CompileOptions &o, ONNXImportOptions &import) {
  for (const auto &[name, file] : o.constInputFiles) {
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return error("--const-input: cannot read '" + file +
                   "': " + buffer.getError().message());
    import.constantInputs.emplace_back(name, (*buffer)->getBuffer().str());
  }
  return 0;
}

/// A bundle of one process compiled without --device-profile is most
/// likely for this machine: a core it lacks is said now, not only when
/// gpipe-run refuses the bundle. (With a profile or ranks, the bundle is
/// for other machines.)
void warnIfDevicesBeyondThisMachine(const CompileOptions &o,
                                    const std::vector<std::string> &devices,
                                    const std::vector<int64_t> &ranks) {
  if (!o.deviceProfile.empty() ||
      llvm::any_of(ranks, [](int64_t r) { return r != 0; }))
    return;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (const std::string &text : devices) {
    std::vector<Device> parsed;
    if (!parseDeviceList(text, parsed).empty())
      continue;
    for (const Device &d : parsed)
      if (d.kind == DeviceKind::Cpu && llvm::any_of(d.ids, [&](int core) {
            return static_cast<unsigned>(core) >= cores;
          })) {
        llvm::errs() << "gpipe-opt: warning: --devices names " << d.str()
                     << " but this machine has " << cores
                     << " cores: the bundle runs only where the cores exist "
                        "(give --device-profile=FILE of that machine to "
                        "compile for it)\n";
        return;
      }
  }
}

/// A model exported in eval mode trains as exported, which is not what its
/// PyTorch module does in training: BatchNorm with its running statistics
/// (training_mode=0), and weights PyTorch's constant folding computed and
/// renamed `onnx::...` (BatchNorm folded into a convolution, a transposed
/// weight). One warning, at the first such op or parameter.
void warnIfEvalModeExport(ModuleOp module) {
  Operation *firstNorm = nullptr, *firstFolded = nullptr;
  int64_t norms = 0, folded = 0;
  module.walk([&](Operation *op) {
    if (auto bn = dyn_cast<nn::BatchNormOp>(op); bn && !bn.getTraining()) {
      firstNorm = firstNorm ? firstNorm : op;
      ++norms;
    }
    if (auto p = dyn_cast<ParameterOp>(op);
        p && p.getTrainable() && p.getSymName().starts_with("onnx::")) {
      firstFolded = firstFolded ? firstFolded : op;
      ++folded;
    }
  });
  if (!norms && !folded)
    return;
  std::string what;
  llvm::raw_string_ostream os(what);
  os << "the model looks exported in eval mode: ";
  if (norms)
    os << norms << " BatchNormalization node(s) normalize with their running "
       << "statistics (training_mode=0)" << (folded ? " and " : "");
  if (folded)
    os << folded << " trainable weight(s) are named 'onnx::...' (computed "
       << "by PyTorch's constant folding, e.g. BatchNorm folded into a "
       << "convolution)";
  os << "; it trains as exported, not as the PyTorch module trains. Export "
        "with torch.onnx.export(model.train(), ..., "
        "training=torch.onnx.TrainingMode.TRAINING, "
        "do_constant_folding=False) (docs/export-from-pytorch.md)";
  (firstNorm ? firstNorm : firstFolded)->emitWarning(what);
}

AppendLossOptions lossOptions(const CompileOptions &o) {
  AppendLossOptions loss;
  loss.loss = o.training.loss;
  loss.ignoreIndex = o.training.ignoreIndex;
  loss.classAxis = o.training.classAxis;
  return loss;
}

/// The plans the compiler can weigh for these options: the CPU cores of
/// each rank (of one process without rank prefixes), the batch known, the
/// stages not cut by hand. With --data-parallel, the ranks of every
/// replica, each with the cores its replica-0 rank names, and the batch of
/// all the replicas.
std::optional<PlanSearchSpace>
planSearchSpace(const CompileOptions &o,
                const std::vector<std::string> &devices,
                const std::vector<int64_t> &ranks) {
  if (!o.devices || o.stages != "auto" || !o.batchSize)
    return std::nullopt;
  int64_t perReplica =
      ranks.empty() ? 1 : *std::max_element(ranks.begin(), ranks.end()) + 1;
  std::vector<std::set<int>> cores(perReplica);
  for (size_t i = 0; i < devices.size(); ++i) {
    llvm::Expected<std::vector<Device>> parsed = parseDevices(devices[i]);
    if (!parsed) {
      llvm::consumeError(parsed.takeError());
      return std::nullopt;
    }
    std::vector<int> some = coresOf(*parsed);
    if (some.empty())
      return std::nullopt;
    cores[ranks.empty() ? 0 : ranks[i]].insert(some.begin(), some.end());
  }
  PlanSearchSpace space;
  int64_t replicas = o.training.dataParallel;
  for (int64_t r = 0; r < replicas * perReplica; ++r)
    space.rankCores.emplace_back(cores[r % perReplica].begin(),
                                 cores[r % perReplica].end());
  space.batch = *o.batchSize * replicas;
  space.profiles = o.deviceProfile;
  space.memoryPerDevice = o.memoryPerDevice;
  const std::string &opt = o.training.optimizer;
  space.optimizerSlots =
      opt == "sgd" ? (o.training.momentum != 0.0 ? 1 : 0) : 2;
  return space;
}

/// The plan the flags give, as the search names plans.
PipelinePlan givenPlan(const CompileOptions &o,
                       const std::vector<std::string> &devices,
                       const std::vector<int64_t> &ranks) {
  PipelinePlan plan;
  for (size_t i = 0; i < devices.size(); ++i)
    plan.stages.push_back({devices[i], ranks.empty() ? 0 : ranks[i]});
  plan.replicas = o.training.dataParallel;
  plan.microBatches = o.training.microBatches;
  plan.schedule = parseScheduleKind(o.schedule).value_or(ScheduleKind::GPipe);
  plan.recompute =
      parseRecomputePolicy(o.recompute).value_or(RecomputePolicy::Never);
  return plan;
}

/// What the bundle's native code is for, as --emit=summary, the compile's
/// report and the HTML report say it.
std::string targetLine(const CompileOptions &o) {
  return "target: native x86-64 code for " + o.native.cpu +
         " (--target-cpu=" + o.targetCpu +
         (o.targetFeatures.empty() ? ""
                                   : " --target-features=" + o.targetFeatures) +
         "): needs " + std::to_string(o.native.required.size()) +
         " CPU features, which gpipe-run checks at load; " +
         (o.precision == "bf16"
              ? "products of matrices in bfloat16 with float32 sums, the "
                "rest float32 (--precision=bf16)"
              : "float32 throughout (--precision=fp32)");
}

/// --schedule=auto with the rest of the plan given: the schedule kind the
/// cost model predicts the fastest step for on that plan (among the plans
/// the search weighs for the devices' cores), into `o.schedule`; the plans
/// weighed into `weighed` (the compile's comparison reads them).
int chooseSchedule(ModuleOp module, CompileOptions &o,
                   const std::vector<std::string> &devices,
                   const std::vector<int64_t> &ranks,
                   const std::optional<PlanSearchSpace> &space,
                   std::optional<std::vector<PlanCandidate>> &weighed) {
  if (!space)
    return error("--schedule=auto weighs the schedules with the plan search, "
                 "which plans CPU cores: give them with --devices=cpu:A,cpu:B "
                 "(or ranks' cores), with a known batch and without "
                 "--stages=manual:..., or name the schedule (" +
                 scheduleKindNames() + ")");
  llvm::Expected<std::vector<PlanCandidate>> plans =
      weighPlans(module, lossOptions(o), o.costTable, *space);
  if (!plans)
    return error(llvm::toString(plans.takeError()));
  // The given plan under each kind the search weighed for it (in the
  // registry's order, for the printed list).
  PipelinePlan given = givenPlan(o, devices, ranks);
  const PlanCandidate *best = nullptr;
  std::string predictions;
  for (const ScheduleKindInfo &info : scheduleKinds()) {
    given.schedule = info.kind;
    for (const PlanCandidate &c : *plans) {
      if (!c.fits || !c.sameAs(given) || c.plan.schedule != info.kind)
        continue;
      predictions +=
          llvm::formatv("{0}{1} {2:f3} ms", predictions.empty() ? "" : ", ",
                        info.name, c.step * 1e3)
              .str();
      if (!best || c.step < best->step)
        best = &c;
    }
  }
  if (!best)
    return error("--schedule=auto found no schedule for this plan that fits "
                 "the devices' memory among the plans it weighs (--recompute="
                 "never or auto, micro-batches dividing the batch, stages on "
                 "the cores as --emit=plans lists them): name the schedule (" +
                 scheduleKindNames() + ")");
  o.schedule = toString(best->plan.schedule).str();
  llvm::outs() << "schedule: " << o.schedule
               << " (predicted step: " << predictions << ")\n";
  weighed = std::move(*plans);
  return 0;
}

int compileTraining(const CompileOptions &o, ModuleOp module,
                    const std::vector<std::string> &devices,
                    const std::vector<int64_t> &ranks,
                    const std::string &deviceList,
                    const std::optional<PlanSearchSpace> &space,
                    std::optional<std::vector<PlanCandidate>> plans) {
  warnIfEvalModeExport(module);
  // An interleaved schedule runs the stages of each device in turns: the
  // devices listed over again, in order.
  if (std::optional<ScheduleKind> kind = parseScheduleKind(o.schedule);
      kind && scheduleKindInfo(*kind).interleaves) {
    std::string why = interleavingError(
        givenPlan(o, devices, ranks).deviceKeys(), o.training.microBatches,
        scheduleKindInfo(*kind).layout);
    if (!why.empty())
      return error("--schedule=" + o.schedule + " " + why);
  }
  TrainingPipelineOptions t;
  t.loss = lossOptions(o);
  t.partition.deviceList = o.devices ? deviceList : "cpu:0";
  // Messages name a stage's device as the user did, with its rank.
  if (o.devices && !ranks.empty())
    t.partition.deviceNames = *o.devices;
  t.partition.stages = o.stages;
  t.partition.microBatches = o.training.microBatches;
  t.partition.schedule = o.schedule;
  t.partition.recompute = o.recompute;
  t.partition.profile = o.deviceProfile;
  t.partition.costTable = o.costTable;
  t.partition.memoryPerDevice = o.memoryPerDevice;
  t.optimizer.optimizer = o.training.optimizer;
  t.optimizer.momentum = o.training.momentum != 0.0;
  t.optimizer.nesterov = o.training.nesterov;
  t.bundleDevices = devices;
  t.ranks = ranks;
  t.dataParallel = o.training.dataParallel;
  if (o.attentionMinKeys) {
    t.attention = FuseAttentionOptions{};
    t.attention->minKeys = *o.attentionMinKeys;
  }
  TrainingStop stop = TrainingStop::Lowered;
  if (o.emit == CompileOutput::Stages)
    stop = TrainingStop::Stages;
  else if (o.emit == CompileOutput::Autodiff)
    stop = TrainingStop::Autodiff;
  else if (o.emit == CompileOutput::Schedule)
    stop = TrainingStop::Schedule;
  // The import as it was, for the plan search after the compile (unless
  // the plans were weighed already: --plan=auto).
  OwningOpRef<ModuleOp> imported;
  if (space && !plans)
    imported = module.clone();
  std::string text;
  llvm::raw_string_ostream phaseOS(text);
  FailureOr<TrainingPipelineResult> result =
      compileTrainingPipeline(module, t, stop, phaseOS);
  if (failed(result))
    return 1;
  if (stop != TrainingStop::Lowered)
    return writeText(o.output, [&](llvm::raw_ostream &os) { os << text; });
  if (o.emit == CompileOutput::LLVM) {
    return writeText(o.output, [&](llvm::raw_ostream &os) {
      for (auto [k, stage] : llvm::enumerate(result->stages)) {
        auto target =
            createStageTarget(devices[k], *stage, {o.cudaArch, o.native});
        if (failed(target) || failed((*target)->lower(*stage)))
          return;
        stage->print(os, OpPrintingFlags());
        os << "\n";
      }
    });
  }
  BundleOptions bundle;
  bundle.sourceName = llvm::sys::path::filename(o.input).str();
  bundle.sourcePath = o.input;
  bundle.devices = devices;
  bundle.ranks = ranks;
  bundle.target = {o.cudaArch, o.native};
  bundle.mode = "train";
  bundle.precision = o.precision;
  bundle.schedule = std::move(result->schedule);
  bundle.training = o.training;
  bundle.training.batchSize = o.batchSize.value_or(0); // 0: from the model
  SmallVector<ModuleOp> stages;
  for (auto &stage : result->stages)
    stages.push_back(*stage);
  if (failed(writeBundle(stages, o.output, bundle)))
    return 1;
  if (o.quiet)
    return 0;
  printTrainingConfiguration(o, llvm::outs());
  llvm::outs() << targetLine(o) << "\n";
  printStageReport(*result, llvm::outs());
  if (imported) {
    llvm::Expected<std::vector<PlanCandidate>> weighed =
        weighPlans(*imported, t.loss, o.costTable, *space);
    if (weighed)
      plans = std::move(*weighed);
    else
      llvm::consumeError(weighed.takeError());
  }
  if (plans)
    printPlanComparison(result->plan, result->prediction.stepTime, *plans,
                        llvm::outs());
  if (o.reportPath.empty())
    return 0;
  // Titled by the model file (PyTorch names every graph torch_jit).
  std::string html = stageReportHTML(*result, reportTitle(o.input, *result),
                                     targetLine(o) + "\n");
  return writeText(o.reportPath, [&](llvm::raw_ostream &os) { os << html; });
}

/// The stages' cores as one device ("cpu:0,cpu:1" -> "cpu:0-1"), for the
/// one-stage comparison; none unless every device is CPU cores and they
/// are contiguous.
std::optional<std::string>
oneDeviceOf(const std::vector<std::string> &devices) {
  std::set<int> cores;
  for (const std::string &text : devices) {
    std::vector<Device> parsed;
    if (!parseDeviceList(text, parsed).empty() || parsed.size() != 1 ||
        parsed[0].kind != DeviceKind::Cpu || parsed[0].ids.empty())
      return std::nullopt;
    cores.insert(parsed[0].ids.begin(), parsed[0].ids.end());
  }
  int first = *cores.begin(), last = *cores.rbegin();
  if (last - first + 1 != static_cast<int>(cores.size()))
    return std::nullopt;
  return first == last
             ? "cpu:" + std::to_string(first)
             : "cpu:" + std::to_string(first) + "-" + std::to_string(last);
}

/// --mode=infer with several devices: the stages' forwards, micro-batches
/// streaming through them (Driver/InferencePipeline.h).
int compilePipelinedInference(const CompileOptions &o, ModuleOp module,
                              const std::vector<std::string> &devices,
                              const std::vector<int64_t> &ranks,
                              const std::string &deviceList) {
  InferencePipelineOptions p;
  p.devices = deviceList;
  p.stages = o.stages;
  p.profile = o.deviceProfile;
  p.costTable = o.costTable;
  p.memoryPerDevice = o.memoryPerDevice;
  p.fuseAttention = llvm::none_of(
      devices, [](const std::string &d) { return usesCudaDevice(d); });
  p.ranks = ranks;
  // One stage on the cores of one process: the comparison where the
  // stages share one.
  if (llvm::all_of(ranks, [&](int64_t r) { return r == ranks.front(); }))
    p.oneStageDevice = oneDeviceOf(devices);
  FailureOr<InferencePipelineResult> result =
      compileInferencePipeline(module, p);
  if (failed(result))
    return 1;
  if (o.emit == CompileOutput::LLVM)
    return writeText(o.output, [&](llvm::raw_ostream &os) {
      for (auto [k, stage] : llvm::enumerate(result->stages)) {
        auto target =
            createStageTarget(devices[k], *stage, {o.cudaArch, o.native});
        if (failed(target) || failed((*target)->lower(*stage)))
          return;
        stage->print(os, OpPrintingFlags());
        os << "\n";
      }
    });
  BundleOptions bundle;
  bundle.sourceName = llvm::sys::path::filename(o.input).str();
  bundle.sourcePath = o.input;
  bundle.devices = devices;
  bundle.ranks = ranks;
  bundle.target = {o.cudaArch, o.native};
  bundle.precision = o.precision;
  SmallVector<ModuleOp> stages;
  for (auto &stage : result->stages)
    stages.push_back(*stage);
  if (failed(writeBundle(stages, o.output, bundle)))
    return 1;
  if (!o.quiet) {
    llvm::outs() << targetLine(o) << "\n";
    printInferenceReport(*result, llvm::outs());
  }
  return 0;
}

int compileInference(const CompileOptions &o, ModuleOp module,
                     const std::vector<std::string> &devices,
                     const std::vector<int64_t> &ranks,
                     const std::string &deviceList) {
  if (devices.size() > 1)
    return compilePipelinedInference(o, module, devices, ranks, deviceList);
  // A stage on named CPU cores: its predicted pace, as a pipeline's.
  std::optional<double> predicted;
  int64_t rows = 1;
  if (o.devices && o.emit == CompileOutput::Bundle && !o.quiet &&
      oneDeviceOf(devices)) {
    OwningOpRef<ModuleOp> rewritten = module.clone();
    PassManager pm(module.getContext());
    buildInferenceModelPipeline(pm);
    InferencePipelineOptions p;
    p.profile = o.deviceProfile;
    p.costTable = o.costTable;
    p.memoryPerDevice = o.memoryPerDevice;
    if (succeeded(pm.run(*rewritten)))
      predicted = predictOneStage(*rewritten, devices.front(), p);
    auto fwd = rewritten->lookupSymbol<func::FuncOp>("forward");
    if (fwd && fwd.getNumArguments() > 0)
      if (auto t = dyn_cast<RankedTensorType>(fwd.getArgumentTypes()[0]);
          t && t.getRank() > 0)
        rows = t.getDimSize(0);
  }
  PassManager pm(module.getContext());
  buildInferencePipeline(pm, llvm::none_of(devices, [](const std::string &d) {
                           return usesCudaDevice(d);
                         }));
  if (failed(pm.run(module)))
    return 1;
  if (o.emit == CompileOutput::Bundle) {
    BundleOptions bundle;
    bundle.sourceName = llvm::sys::path::filename(o.input).str();
    bundle.sourcePath = o.input;
    bundle.devices = devices;
    bundle.target = {o.cudaArch, o.native};
    bundle.precision = o.precision;
    if (failed(writeBundle(module, o.output, bundle)))
      return 1;
    if (predicted && *predicted > 0)
      llvm::outs() << llvm::format("predicted: %.4g ms a micro-batch of "
                                   "%lld rows on %s (%.0f rows/s)\n",
                                   *predicted * 1e3,
                                   static_cast<long long>(rows),
                                   devices.front().c_str(), rows / *predicted);
    return 0;
  }
  auto target =
      createStageTarget(devices.front(), module, {o.cudaArch, o.native});
  if (failed(target) || failed((*target)->lower(module)))
    return 1;
  return writeText(o.output, [&](llvm::raw_ostream &os) {
    module->print(os, OpPrintingFlags());
  });
}

} // namespace

StringRef compileOutputName(CompileOutput output) {
  switch (output) {
  case CompileOutput::Bundle:
    return "bundle";
  case CompileOutput::NN:
    return "nn";
  case CompileOutput::Summary:
    return "summary";
  case CompileOutput::Stages:
    return "stages";
  case CompileOutput::Autodiff:
    return "autodiff";
  case CompileOutput::Schedule:
    return "schedule";
  case CompileOutput::Plans:
    return "plans";
  case CompileOutput::LLVM:
    return "llvm";
  }
  return "bundle";
}

int compileModel(const CompileOptions &options, DialectRegistry &registry) {
  MLIRContext context(registry);
  ScopedDiagnosticHandler handler(&context, [](Diagnostic &diag) {
    printDiagnostic(diag);
    return success();
  });
  std::vector<std::string> problems = validate(options);
  bool lowered = options.emit == CompileOutput::Bundle ||
                 options.emit == CompileOutput::LLVM;
  bool training = options.train && (lowered || isTrainingPhase(options.emit));
  int64_t microBatches = options.training.microBatches;
  CompileOptions resolved = options;
  // The host code's CPU, checked before any work (an unknown name is the
  // user's to fix, whatever the model).
  if (llvm::Expected<NativeTargetSpec> native =
          resolveNativeTarget(options.targetCpu, options.targetFeatures))
    resolved.native = *native;
  else
    problems.push_back(llvm::toString(native.takeError()));
  ONNXImportOptions import;
  import.batchSize = options.batchSize;
  import.batchAxes = options.batchAxes;
  // The batch of one optimizer step: --batch-size, else the model's own
  // static batch (a plain torch.onnx.export), read once.
  std::optional<int64_t> batch = options.batchSize;
  if (training && !batch) {
    // An unreadable model is the first thing to say, whatever the flags.
    FailureOr<std::optional<int64_t>> staticBatch =
        onnxStaticBatch(options.input, &context, [&] {
          ONNXImportOptions named = import; // --const-input names: no data
          for (const auto &[name, file] : options.constInputFiles)
            named.constantInputs.emplace_back(name, "");
          return named;
        }());
    if (failed(staticBatch))
      return 1;
    batch = *staticBatch;
  }
  if (training && microBatches > 1) {
    if (!batch)
      problems.push_back("--micro-batches needs --batch-size=B (the samples "
                         "of one optimizer step): the model's batch "
                         "dimension is symbolic (exported with dynamic_axes)");
    else if (*batch % microBatches != 0)
      problems.push_back(
          (options.batchSize ? "--batch-size=" : "the model's batch ") +
          std::to_string(*batch) + " does not split into " +
          std::to_string(microBatches) +
          " equal micro-batches (pick --micro-batches dividing it, or "
          "--batch-size)");
    else
      import.batchSize = *batch / microBatches;
  }
  if (training && !options.batchSize)
    resolved.batchSize = batch; // what the step trains on, for the summary
  if (!problems.empty())
    return errors(problems);
  std::vector<std::string> devices;
  std::vector<int64_t> ranks;
  std::string deviceList;
  if (int rc = parseStageDevices(options, devices, ranks, deviceList))
    return rc;
  warnIfDevicesBeyondThisMachine(options, devices, ranks);
  if (int rc = readConstInputs(options, import))
    return rc;
  import.freeze = options.freeze;
  import.trainable = options.trainable;
  // The model as imported, its products given --precision's compute type
  // before anything prices or cuts it.
  auto importModel = [&]() -> OwningOpRef<ModuleOp> {
    OwningOpRef<ModuleOp> imported =
        importONNXFile(options.input, &context, import);
    if (!imported)
      return nullptr;
    PassManager pm(&context);
    SetPrecisionOptions precision;
    precision.precision = options.precision;
    pm.addPass(createSetPrecision(precision));
    if (failed(pm.run(*imported)))
      return nullptr;
    return imported;
  };
  OwningOpRef<ModuleOp> module = importModel();
  if (!module)
    return 1;
  if (training) {
    std::optional<PlanSearchSpace> space =
        planSearchSpace(resolved, devices, ranks);
    std::optional<std::vector<PlanCandidate>> weighed;
    bool autoPlan =
        options.plan == "auto" || (options.autoPlanWherePossible && space);
    if (autoPlan || options.emit == CompileOutput::Plans) {
      std::string flag =
          options.emit == CompileOutput::Plans ? "--emit=plans" : "--plan=auto";
      if (!space && !resolved.batchSize)
        return error(flag + " needs the samples of one step: the model's "
                            "batch dimension is symbolic, give --batch-size=B");
      if (!space)
        return error(flag + " weighs the plans for CPU cores: give them with "
                            "--devices=cpu:A-B (or a list of cpu:N; on MPI "
                            "ranks r0:cpu:A-B,r1:cpu:A-B,...), without "
                            "--stages=manual:...");
      llvm::Expected<std::vector<PlanCandidate>> plans = weighPlans(
          *module, lossOptions(resolved), resolved.costTable, *space);
      if (!plans)
        return error(llvm::toString(plans.takeError()));
      weighed = std::move(*plans);
      PipelinePlan given = givenPlan(resolved, devices, ranks);
      if (options.emit == CompileOutput::Plans)
        return writeText(options.output, [&](llvm::raw_ostream &os) {
          printPlans(*weighed, space->batch, autoPlan ? nullptr : &given, os);
        });
      const PlanCandidate &best = weighed->front();
      if (!best.fits)
        return error("no plan for --devices=" + *options.devices +
                     " fits the cores' memory (--emit=plans lists the " +
                     std::to_string(weighed->size()) + " plans weighed)");
      llvm::outs() << "plan: " << best.flags()
                   << llvm::format(" (%.4g ms a step predicted, the fastest "
                                   "of %zu plans weighed; --emit=plans lists "
                                   "them)\n",
                                   best.step * 1e3, weighed->size());
      // On ranks, --batch-size was the step's (every replica's); the
      // bundle takes a replica's.
      resolved.devices = best.plan.deviceList();
      resolved.schedule = toString(best.plan.schedule).str();
      resolved.recompute = toString(best.plan.recompute).str();
      resolved.training.dataParallel = best.plan.replicas;
      resolved.training.microBatches = best.plan.microBatches;
      resolved.batchSize = best.replicaBatch;
      int64_t rows = best.replicaBatch / best.plan.microBatches;
      if (import.batchSize != rows) {
        import.batchSize = rows;
        module = importModel();
        if (!module)
          return 1;
      }
      if (int rc = parseStageDevices(resolved, devices, ranks, deviceList))
        return rc;
    } else if (options.schedule == "auto") {
      if (int rc =
              chooseSchedule(*module, resolved, devices, ranks, space, weighed))
        return rc;
    }
    return compileTraining(resolved, *module, devices, ranks, deviceList, space,
                           std::move(weighed));
  }
  if (!options.train &&
      (options.plan == "auto" || options.emit == CompileOutput::Plans)) {
    // Pipelined inference's plans for the cores given: one stage on all of
    // them, or stages of equal groups of them.
    std::string flag =
        options.emit == CompileOutput::Plans ? "--emit=plans" : "--plan=auto";
    std::set<int> cores;
    bool cpu = options.devices.has_value();
    for (const std::string &text : devices) {
      std::vector<Device> parsed;
      cpu &= parseDeviceList(text, parsed).empty();
      for (const Device &d : parsed) {
        cpu &= d.kind == DeviceKind::Cpu && !d.ids.empty();
        cores.insert(d.ids.begin(), d.ids.end());
      }
    }
    if (!cpu || !ranks.empty())
      return error(flag + " with --mode=infer weighs plans for the CPU cores "
                          "of one process: give them with --devices=cpu:A-B");
    InferencePipelineOptions p;
    p.profile = options.deviceProfile;
    p.costTable = options.costTable;
    p.memoryPerDevice = options.memoryPerDevice;
    std::vector<InferencePlan> plans = weighInferencePlans(
        *module, std::vector<int>(cores.begin(), cores.end()), p);
    int64_t rows = 1;
    if (auto fwd = module->lookupSymbol<func::FuncOp>("forward"))
      if (fwd.getNumArguments() > 0)
        if (auto t = dyn_cast<RankedTensorType>(fwd.getArgumentTypes()[0]);
            t && t.getRank() > 0)
          rows = t.getDimSize(0);
    if (options.emit == CompileOutput::Plans)
      return writeText(options.output, [&](llvm::raw_ostream &os) {
        printInferencePlans(plans, rows, os);
      });
    if (plans.empty() || !plans.front().fits)
      return error("--plan=auto: no plan for --devices=" + *options.devices +
                   " fits the cores' memory (--emit=plans lists the plans "
                   "weighed)");
    const InferencePlan &best = plans.front();
    if (!options.quiet)
      llvm::outs() << "plan: --devices=" << best.devices
                   << llvm::format(" (a micro-batch every %.4g ms predicted "
                                   "streaming, the fastest of %zu plans "
                                   "weighed; --emit=plans lists them)\n",
                                   best.interval * 1e3, plans.size());
    resolved.devices = best.devices;
    if (int rc = parseStageDevices(resolved, devices, ranks, deviceList))
      return rc;
  }
  if (lowered)
    return compileInference(resolved, *module, devices, ranks, deviceList);
  return writeText(options.output, [&](llvm::raw_ostream &os) {
    if (options.emit == CompileOutput::Summary) {
      printModelSummary(*module, os);
      os << targetLine(resolved) << "\n";
    } else
      module->print(os, OpPrintingFlags());
  });
}

} // namespace gpipe
