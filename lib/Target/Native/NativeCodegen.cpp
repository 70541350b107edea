//===- NativeCodegen.cpp - Stage modules to x86-64 shared libraries -------===//
#include "Target/Native/NativeCodegen.h"

#include "Transforms/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

#include "gpipe/common/CpuFeatures.h"

#include "lld/Common/Driver.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <mutex>

LLD_HAS_DRIVER(elf)

using namespace mlir;

namespace {

const llvm::Target *nativeTarget(std::string &triple, std::string &error) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
  triple = llvm::sys::getProcessTriple();
  return llvm::TargetRegistry::lookupTarget(triple, error);
}

llvm::Error targetError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

} // namespace

llvm::Expected<gpipe::NativeTargetSpec>
gpipe::resolveNativeTarget(llvm::StringRef cpu, llvm::StringRef features) {
  std::string triple, error;
  const llvm::Target *target = nativeTarget(triple, error);
  if (!target)
    return targetError("no LLVM target for this host: " + error);
  NativeTargetSpec spec;
  std::unique_ptr<llvm::MCSubtargetInfo> probe(
      target->createMCSubtargetInfo(triple, "", ""));
  if (cpu.empty() || cpu == "host") {
    spec.cpu = llvm::sys::getHostCPUName().str();
    for (auto &[name, enabled] : llvm::sys::getHostCPUFeatures())
      spec.features += (enabled ? "+" : "-") + name.str() + ",";
  } else if (!probe->isCPUStringValid(cpu)) {
    return targetError(
        "--target-cpu=" + cpu +
        ": not a CPU LLVM knows for x86-64; give host (this machine's, the "
        "default), a portable level (x86-64, x86-64-v2, x86-64-v3, "
        "x86-64-v4) or a CPU name such as znver4, skylake-avx512 or "
        "sapphirerapids");
  } else {
    spec.cpu = cpu.str();
  }
  llvm::SmallVector<llvm::StringRef> items;
  features.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    item = item.trim();
    llvm::StringRef name = item.drop_front();
    bool known = llvm::any_of(
        probe->getAllProcessorFeatures(),
        [&](const llvm::SubtargetFeatureKV &kv) { return name == kv.Key; });
    if ((!item.starts_with("+") && !item.starts_with("-")) || !known)
      return targetError(
          "--target-features: '" + item +
          "' is not a change of a feature LLVM knows for x86-64: give "
          "+NAME or -NAME, comma-separated, with LLVM's names (+avx512f, "
          "-avx512fp16, +fma)");
    spec.features += item.str() + ",";
  }
  std::unique_ptr<llvm::MCSubtargetInfo> info(
      target->createMCSubtargetInfo(triple, spec.cpu, spec.features));
  for (const llvm::SubtargetFeatureKV &kv : info->getAllProcessorFeatures())
    if (isKnownCpuFeature(kv.Key) && info->getFeatureBits().test(kv.Value))
      spec.required.push_back(kv.Key);
  return spec;
}

LogicalResult gpipe::lowerStageToLLVMDialect(ModuleOp module) {
  // bfloat16 conversions as integer arithmetic: LLVM would call compiler
  // builtins (__truncsfbf2) that the runtime's libgcc may not have.
  RewritePatternSet bf16(module.getContext());
  arith::populateExpandBFloat16Patterns(bf16);
  if (failed(applyPatternsAndFoldGreedily(module, std::move(bf16))))
    return failure();
  // float32 erf, exp, tanh, log, ... as polynomials the loop vectorizer
  // widens, instead of a libm call per element (GELU's erf was a seventh
  // of a GPT step); what is left (other types, pow) still calls libm.
  RewritePatternSet math(module.getContext());
  populateMathPolynomialApproximationPatterns(math);
  if (failed(applyPatternsAndFoldGreedily(module, std::move(math))))
    return failure();
  PassManager pm(module.getContext());
  pm.addPass(createCollapseElementwiseLoops());
  pm.addPass(createOutlineParallelLoops());
  pm.addPass(createTileTransposingLoops());
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(createConvertSCFToCFPass());
  // LLVM's intrinsics first (fma is an instruction, not a libm call),
  // libm for the functions without one.
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(funcOptions));
  pm.addPass(createLowerParallelForToLLVM());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  // Masks read as bytes: loops over them vectorize.
  pm.addPass(createBooleansAsBytes());
  pm.addPass(createCanonicalizerPass());
  return pm.run(module);
}

namespace {

std::unique_ptr<llvm::TargetMachine>
createTargetMachine(const gpipe::NativeTargetSpec &spec, std::string &error) {
  std::string triple;
  const llvm::Target *target = nativeTarget(triple, error);
  if (!target)
    return nullptr;
  llvm::TargetOptions options;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, spec.cpu, spec.features, options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
}

} // namespace

namespace {
/// LLVM's O3 pipeline for the host, with full unrolling capped at 16
/// iterations: vectorized transposes of a Transformer's attention (strided
/// gathers with static trip counts in the thousands) were otherwise unrolled
/// into basic blocks of 100k instructions, and the SLP vectorizer and
/// instruction selection, quadratic on them, took minutes.
void optimizeModule(llvm::Module &module, llvm::TargetMachine &machine) {
  // LLVM has this limit only as a command-line option of its own; set
  // for every module, since the in-process linker resets all options.
  auto &options = llvm::cl::getRegisteredOptions();
  if (llvm::cl::Option *o = options.lookup("unroll-full-max-count"))
    o->addOccurrence(0, "unroll-full-max-count", "16");
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = true;
  tuning.LoopInterleaving = true;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(&machine, tuning);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
      .run(module, modules);
}
} // namespace

LogicalResult gpipe::emitStageLibrary(ModuleOp module, llvm::StringRef path,
                                      const NativeTargetSpec &target) {
  if (target.cpu.empty())
    return module.emitError("the stage's target CPU was not resolved "
                            "(resolveNativeTarget)");
  if (failed(lowerStageToLLVMDialect(module)))
    return failure();
  registerBuiltinDialectTranslation(*module.getContext());
  registerLLVMDialectTranslation(*module.getContext());
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "gpipe_stage");
  if (!llvmModule)
    return module.emitError("translation to LLVM IR failed");

  std::string error;
  std::unique_ptr<llvm::TargetMachine> machine =
      createTargetMachine(target, error);
  if (!machine)
    return module.emitError("no LLVM target for this host: ") << error;
  llvmModule->setDataLayout(machine->createDataLayout());
  llvmModule->setTargetTriple(machine->getTargetTriple().getTriple());
  optimizeModule(*llvmModule, *machine);

  // Object file, then a shared library linked by lld in process.
  llvm::SmallString<128> object;
  if (auto ec = llvm::sys::fs::createTemporaryFile("gpipe-stage", "o", object))
    return module.emitError("cannot create a temporary file: ") << ec.message();
  llvm::FileRemover removeObject(object);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(object, ec, llvm::sys::fs::OF_None);
    if (ec)
      return module.emitError("cannot write ")
             << object << ": " << ec.message();
    llvm::legacy::PassManager codegen;
    if (machine->addPassesToEmitFile(codegen, os, nullptr,
                                     llvm::CodeGenFileType::ObjectFile))
      return module.emitError("the target cannot emit object files");
    codegen.run(*llvmModule);
  }
  std::string linkOutput;
  llvm::raw_string_ostream linkLog(linkOutput);
  std::string out = path.str(), obj = object.str().str();
  const char *args[] = {"ld.lld", "-shared",   "--hash-style=gnu",
                        "-o",     out.c_str(), obj.c_str()};
  lld::Result result =
      lld::lldMain(args, linkLog, linkLog, {{lld::Gnu, &lld::elf::link}});
  if (result.retCode != 0 || !result.canRunAgain)
    return module.emitError("linking the stage library failed: ")
           << linkLog.str();
  return success();
}
