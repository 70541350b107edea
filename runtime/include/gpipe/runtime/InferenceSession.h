// Inference with a bundle: named inputs in, named outputs out.
#ifndef GPIPE_RUNTIME_INFERENCESESSION_H
#define GPIPE_RUNTIME_INFERENCESESSION_H

#include "gpipe/runtime/Bundle.h"
#include "gpipe/runtime/Tensor.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpipe::runtime {

/// Bad inputs: a missing or unknown name, a wrong dtype or shape.
class InputError : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

class StageExecutor;
class ProcessGroup;
class Transport;

class InferenceSession {
public:
  /// Loads and checks the bundle (BundleError if it cannot be used). A
  /// bundle whose stages are on several MPI ranks runs as one rank of
  /// `group` (every rank creates its session and calls run() with the same
  /// inputs; each runs its own stages).
  explicit InferenceSession(const std::string &bundlePath,
                            ProcessGroup *group = nullptr);
  ~InferenceSession();
  InferenceSession(const InferenceSession &) = delete;
  InferenceSession &operator=(const InferenceSession &) = delete;

  const Bundle &bundle() const { return bundle_; }
  /// The batch the bundle was compiled for (first dim of its first input).
  int64_t compiledBatch() const;

  /// Runs the model. Inputs match the bundle's by name, dtype and shape,
  /// except that the first (batch) dimension may be any size: inputs larger
  /// than the compiled batch run in micro-batches of it (the last one padded
  /// with zeros), and outputs are cut back to the rows given. A bundle of
  /// several stages streams the micro-batches through them: stage s runs
  /// micro-batch c while stage s+1 runs c-1.
  std::map<std::string, HostTensor>
  run(const std::map<std::string, HostTensor> &inputs);

  /// The bundle's stages (more than one: pipelined inference, each
  /// stage's forward on its device's thread).
  size_t stageCount() const { return bundle_.stages.size(); }
  /// Times every kernel and generated loop of the runs that follow
  /// (gpipe-run --infer --profile-ops); `enable` false stops it.
  void setProfile(bool enable);
  /// Each model op's mean seconds per micro-batch over the profiled runs,
  /// its kernels' and generated loops' (this process's stages), and the
  /// micro-batches those runs took.
  std::map<std::string, double> opProfile() const;
  int64_t profiledMicroBatches() const { return profiledChunks; }

  /// Whether run() returns the outputs here: the rank of the last stage
  /// (always, in one process); run() returns none elsewhere.
  bool ownsOutputs() const;

private:
  struct PipelineStage;
  Bundle bundle_;
  int64_t rank = 0;
  std::unique_ptr<StageExecutor> stage; // one stage
  /// Several: one per stage, null for a stage on another rank.
  std::vector<std::unique_ptr<PipelineStage>> pipeline;
  /// Messages to and from stages on other ranks.
  std::unique_ptr<Transport> transport;
  bool profiling = false;
  int64_t profiledChunks = 0;
  /// Why run() is refused: a run across ranks failed before.
  std::string failedRun;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_INFERENCESESSION_H
