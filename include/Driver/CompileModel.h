//===- CompileModel.h - From an ONNX file to a bundle or IR -----*- C++ -*-===//
//
// What gpipe-opt does with a .onnx input, as a library call: import, then
// either print a phase (--emit) or compile and write a bundle (inference on
// one device, or a pipelined training bundle with its per-stage report).
// gpipe-opt parses its flags into CompileOptions and calls compileModel.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_DRIVER_COMPILEMODEL_H
#define GPIPE_DRIVER_COMPILEMODEL_H

#include "Bundle/BundleWriter.h"

#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpipe {

/// What to produce (gpipe-opt --emit; Bundle when not given).
enum class CompileOutput {
  Bundle,   // a bundle directory for gpipe-run
  NN,       // the imported nn IR
  Summary,  // the model summary (layers, parameters, frozen initializers)
  Stages,   // training: the partitioned stages
  Autodiff, // training: each stage with its backward
  Schedule, // training: the verified schedule
  Plans,    // training: the plans weighed for the cores (PlanSearch)
  LLVM      // each stage lowered to the LLVM dialect
};

/// The --emit spelling of `output` ("nn", "stages", ...; "bundle").
llvm::StringRef compileOutputName(CompileOutput output);

struct CompileOptions {
  std::string input;        // the .onnx file
  std::string output = "-"; // "-" is stdout (IR only; a bundle needs a path)
  CompileOutput emit = CompileOutput::Bundle;
  bool train = false; // --mode=train
  /// Samples per run (inference) or per optimizer step (training); none:
  /// the model's static batch.
  std::optional<int64_t> batchSize;
  /// --devices as given; none: the whole host ("cpu", unpinned).
  std::optional<std::string> devices;
  /// --const-input NAME=FILE bindings (FILE: a serialized TensorProto).
  std::vector<std::pair<std::string, std::string>> constInputFiles;
  /// --batch-axis: (input name or "" for all, the dimension carrying the
  /// batch).
  std::vector<std::pair<std::string, int64_t>> batchAxes;
  /// --freeze and --trainable: initializer name patterns.
  std::vector<std::string> freeze, trainable;
  /// Training: loss, optimizer and hyper-parameters, micro-batches (its
  /// batchSize is filled from `batchSize` or the model).
  TrainingOptions training;
  std::string stages = "auto", schedule = "gpipe", recompute = "never";
  /// --precision: "fp32", or "bf16" (products of matrices multiplied in
  /// bfloat16 with float32 sums; gpipe-set-precision).
  std::string precision = "fp32";
  /// "given": the devices, micro-batches, schedule and recompute as
  /// written; "auto": the fastest plan the search predicts for the cores
  /// of `devices`.
  std::string plan = "given";
  /// With plan "given": auto instead where the devices are CPU cores and
  /// the step's batch is known (gpipe-opt's default when it is given the
  /// devices and no other part of a plan).
  bool autoPlanWherePossible = false;
  std::string deviceProfile, costTable;
  /// --memory-per-device in bytes (0: the profiles' memory).
  int64_t memoryPerDevice = 0;
  /// The GPU architecture of CUDA stages.
  std::string cudaArch = "sm_80";
  /// The CPU of the host code (--target-cpu: "host", an x86-64 level or
  /// a CPU of LLVM's) and changes to its features (--target-features,
  /// "+avx512f,-fma"); compileModel resolves them into `native`.
  std::string targetCpu = "host", targetFeatures;
  NativeTargetSpec native;
  /// Training: also write the HTML report here.
  std::string reportPath;
  /// Training: attention fused from this many keys on (none: the pass's
  /// default, gpipe-fuse-attention's min-keys); the calibration fuses its
  /// short sequences' attention, as the figures it times them by do.
  std::optional<int64_t> attentionMinKeys;
  /// Training: print neither the configuration nor the stage report.
  bool quiet = false;
};

/// Runs the compile; errors are printed one line each to llvm::errs()
/// ("model.onnx: error: node 'n': ..."). Returns the process exit code: 0,
/// 1 for bad input, 2 for something not implemented yet. Nothing is written
/// to `options.output` unless the compile succeeds.
int compileModel(const CompileOptions &options,
                 mlir::DialectRegistry &registry);

} // namespace gpipe

#endif // GPIPE_DRIVER_COMPILEMODEL_H
