//===- BundleWriter.h - Writing gpipe bundles -------------------*- C++ -*-===//
//
// A bundle is a directory (docs/bundle.md): manifest.json, and per stage
// its parameters and its shared library, each part with a CRC-32 in the
// manifest.
//
//===----------------------------------------------------------------------===//
#ifndef GPIPE_BUNDLE_BUNDLEWRITER_H
#define GPIPE_BUNDLE_BUNDLEWRITER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include "Target/StageTarget.h"
#include "gpipe/common/BundleFormat.h"

#include <optional>
#include <string>

namespace gpipe {

/// How a training bundle trains (mode "train").
struct TrainingOptions {
  int64_t batchSize = 0;    // samples per optimizer step
  int64_t microBatches = 1; // the step's split; the stage runs batchSize/M
  std::string loss = "cross-entropy";
  int64_t ignoreIndex = -100; // cross-entropy: labels that count for nothing
  int64_t classAxis = -1;     // cross-entropy: the logits' class axis
  std::string optimizer = "sgd";
  double lr = 0.01, momentum = 0.0, weightDecay = 0.0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8; // Adam, AdamW
  /// Replicas of the pipeline (--data-parallel), each on its own ranks,
  /// each training on batchSize rows of a global batch D x batchSize.
  int64_t dataParallel = 1;
};

struct BundleOptions {
  std::string mode = "infer";
  /// One per stage; "cpu" is the whole host, unpinned.
  std::vector<std::string> devices{"cpu"};
  /// The MPI rank of each stage (docs/distributed.md); empty: one process.
  std::vector<int64_t> ranks;
  std::string sourceName;
  /// Path of the source model; training bundles keep a copy (model.onnx)
  /// so that gpipe-run can write the trained weights back into it.
  std::string sourcePath;
  TrainingOptions training;
  /// The static schedule of a training bundle (docs/bundle.md).
  std::optional<llvm::json::Value> schedule;
  /// What the stage targets take (--cuda-arch).
  StageTargetOptions target;
  /// --precision: "fp32", or "bf16" (the products' compute type; the
  /// manifest's "precision").
  std::string precision = "fp32";
};

/// Compiles the stage modules (one per stage, in order; each must have gone
/// through gpipe-lower-stage, each with its own parameter blob) and writes the
/// bundle directory at `path`: built next to it and renamed into place, so that
/// a failure leaves whatever was at `path` untouched. The modules are consumed:
/// their gpipe.parameter ops are erased once their bytes are in the stage's
/// parameter file, and they are lowered to LLVM for the stage libraries (which
/// resets LLVM's command-line options; see emitStageLibrary).
mlir::LogicalResult writeBundle(llvm::ArrayRef<mlir::ModuleOp> stages,
                                llvm::StringRef path,
                                const BundleOptions &options);

} // namespace gpipe

#endif // GPIPE_BUNDLE_BUNDLEWRITER_H
