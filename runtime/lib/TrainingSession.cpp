#include "gpipe/runtime/TrainingSession.h"
#include "gpipe/runtime/FileIO.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace gpipe::runtime {

namespace {
/// The optimizer phase's `hyper:<name>` inputs, in TrainingSession::Hyper
/// order.
constexpr std::pair<const char *, TrainingSession::Hyper> kHyperParameters[] = {
    {"lr", TrainingSession::Hyper::LR},
    {"weight_decay", TrainingSession::Hyper::WeightDecay},
    {"momentum", TrainingSession::Hyper::Momentum},
    {"beta1", TrainingSession::Hyper::Beta1},
    {"beta2", TrainingSession::Hyper::Beta2},
    {"eps", TrainingSession::Hyper::Eps},
    {"step_size", TrainingSession::Hyper::StepSize},
    {"bias_correction2", TrainingSession::Hyper::BiasCorrection2}};
} // namespace

TrainingSession::TrainingSession(const std::string &bundlePath)
    : bundle_(loadBundle(bundlePath)) {
  if (bundle_.mode != "train")
    throw BundleError(bundlePath + ": manifest.json: an '" + bundle_.mode +
                      "' bundle cannot train (compile with --mode=train)");
  const std::string &kind = bundle_.training.optimizer;
  if (kind != "sgd" && kind != "adam" && kind != "adamw")
    throw BundleError(bundlePath + ": manifest.json: unknown optimizer '" +
                      kind + "'");
  lr_ = bundle_.training.lr;
  stage = std::make_unique<StageExecutor>(bundle_, bundle_.stages.front());
  const StageSpec &spec = bundle_.stages.front();
  const PhaseSpec *fwd = spec.phase("forward"), *bwd = spec.phase("backward");
  if (!fwd || !bwd)
    throw BundleError(bundlePath + ": manifest.json: a training bundle needs "
                                   "forward and backward phases");
  forwardPhase = stage->phaseIndex("forward");
  backwardPhase = stage->phaseIndex("backward");
  loss = fwd->output("loss");
  lossGrad = bwd->input("loss_grad");
  for (const TensorSlot &s : fwd->outputs)
    if (!modelOutput && s.name != "loss" && s.name.rfind("stash:", 0) != 0)
      modelOutput = &s;
  if (!loss || !lossGrad || loss->dtype != DType::F32 ||
      lossGrad->dtype != DType::F32)
    throw BundleError(bundlePath + ": manifest.json: a training bundle needs "
                                   "a float32 'loss' output and 'loss_grad' "
                                   "input");
  const PhaseSpec *opt = spec.phase("optimizer");
  if (!opt)
    throw BundleError(bundlePath + ": manifest.json: a training bundle needs "
                                   "an optimizer phase");
  optimizerPhase = stage->phaseIndex("optimizer");
  for (const TensorSlot &p : bundle_.parameters) {
    if (const TensorSlot *g = bwd->output("grad:" + p.name)) {
      const TensorSlot *sum = opt->input("grad:" + p.name);
      if (p.dtype != DType::F32 || g->byteSize() != p.byteSize() || !sum ||
          sum->byteSize() != p.byteSize())
        throw BundleError(bundlePath + ": manifest.json: gradient of '" +
                          p.name + "' does not match the parameter");
      trained.push_back({&p, g, sum});
    }
  }
  for (const TensorSlot &in : opt->inputs)
    if (in.name.rfind("hyper:", 0) == 0) {
      if (in.dtype != DType::F32 || in.numElements() != 1)
        throw BundleError(bundlePath + ": manifest.json: '" + in.name +
                          "' must be a float32 scalar");
      std::string name = in.name.substr(6);
      auto known =
          std::find_if(std::begin(kHyperParameters), std::end(kHyperParameters),
                       [&](const auto &h) { return name == h.first; });
      if (known == std::end(kHyperParameters))
        throw BundleError(bundlePath +
                          ": manifest.json: the optimizer asks "
                          "for an unknown hyper-parameter '" +
                          name + "'");
      hyper.push_back({known->second, &in});
    }
  for (const TensorSlot &s : fwd->inputs)
    dataInputs_.push_back(&s);
  // What the backward reads besides loss_grad: values the forward kept
  // (same name among its outputs) or, when it recomputes, the data inputs.
  for (const TensorSlot &in : bwd->inputs) {
    if (&in == lossGrad)
      continue;
    if (const TensorSlot *kept = fwd->output(in.name)) {
      if (kept->byteSize() != in.byteSize())
        throw BundleError(bundlePath + ": manifest.json: '" + in.name +
                          "' differs between the phases");
      carried.push_back({&in, kept, stashBytes_});
      stashBytes_ += in.byteSize();
    } else if (fwd->input(in.name)) {
      carried.push_back({&in, nullptr, -1});
    } else {
      throw BundleError(bundlePath + ": manifest.json: the backward input '" +
                        in.name + "' comes from nowhere");
    }
  }
  // The last micro-batch needs no stash of its own.
  stash.assign(static_cast<size_t>(bundle_.training.microBatches - 1),
               std::vector<char>(static_cast<size_t>(stashBytes_)));
}

double TrainingSession::step(const std::map<std::string, HostTensor> &batch) {
  int64_t m = bundle_.training.microBatches, n = batchSize();
  for (const TensorSlot *slot : dataInputs()) {
    auto it = batch.find(slot->name);
    if (it == batch.end())
      throw InputError("training data has no '" + slot->name + "'");
    const HostTensor &t = it->second;
    std::vector<int64_t> expected = slot->shape;
    if (expected.empty() || t.dtype != slot->dtype ||
        t.shape.size() != expected.size() || t.shape[0] != n ||
        !std::equal(expected.begin() + 1, expected.end(), t.shape.begin() + 1))
      throw InputError("training batch '" + slot->name + "' is " +
                       t.describe() + "; each step needs " + std::to_string(n) +
                       " rows of " + dtypeName(slot->dtype) +
                       " with the model's other dimensions");
  }
  // Gradients accumulate where the optimizer phase reads them (the first
  // backward's are copied there, the others added).
  char *oa = stage->arena(optimizerPhase);
  // Micro-batch k's rows of a data input.
  auto rows = [&](const std::string &name, int64_t bytes, int64_t k) {
    return reinterpret_cast<const char *>(batch.at(name).data.data()) +
           k * bytes;
  };

  // GPipe on one stage: every micro-batch's forward, keeping what its
  // backward needs, then the backwards in reverse order.
  double lossSum = 0;
  char *fa = stage->arena(forwardPhase), *ba = stage->arena(backwardPhase);
  for (int64_t k = 0; k < m; ++k) {
    for (const TensorSlot *slot : dataInputs())
      std::memcpy(fa + slot->offset, rows(slot->name, slot->byteSize(), k),
                  slot->byteSize());
    stage->setRandomState({randomSeed, steps, k});
    stage->run(forwardPhase);
    float microLoss;
    std::memcpy(&microLoss, fa + loss->offset, sizeof(float));
    lossSum += microLoss;
    // The last micro-batch's backward comes next: its kept values go
    // straight to the backward's inputs.
    for (const Carried &c : carried)
      if (c.kept)
        std::memcpy(k == m - 1 ? ba + c.input->offset
                               : stash[k].data() + c.stashOffset,
                    fa + c.kept->offset, c.kept->byteSize());
  }
  float seed = 1.0f / static_cast<float>(m);
  for (int64_t k = m - 1; k >= 0; --k) {
    for (const Carried &c : carried)
      if (!c.kept || k != m - 1)
        std::memcpy(ba + c.input->offset,
                    c.kept ? stash[k].data() + c.stashOffset
                           : rows(c.input->name, c.input->byteSize(), k),
                    c.input->byteSize());
    std::memcpy(ba + lossGrad->offset, &seed, sizeof(float));
    stage->setRandomState({randomSeed, steps, k});
    stage->run(backwardPhase);
    for (const Trained &t : trained) {
      if (k == m - 1) {
        std::memcpy(oa + t.sum->offset, ba + t.grad->offset, t.sum->byteSize());
        continue;
      }
      const float *g = reinterpret_cast<const float *>(ba + t.grad->offset);
      float *acc = reinterpret_cast<float *>(oa + t.sum->offset);
      for (int64_t j = 0, n = t.param->numElements(); j < n; ++j)
        acc[j] += g[j];
    }
  }
  optimizerStep();
  ++steps;
  return lossSum / static_cast<double>(m);
}

void TrainingSession::setHyperParameter(const std::string &name, double value) {
  TrainingSpec &t = bundle_.training;
  std::map<std::string, double *> known{{"momentum", &t.momentum},
                                        {"weight_decay", &t.weightDecay},
                                        {"beta1", &t.beta1},
                                        {"beta2", &t.beta2},
                                        {"eps", &t.eps}};
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  auto it = known.find(name);
  bool used = std::any_of(hyper.begin(), hyper.end(), [&](const auto &h) {
    return kHyperParameters[static_cast<int>(h.first)].first == name;
  });
  if (it == known.end() || !used)
    throw InputError(flag + ": the bundle's " + t.optimizer +
                     " optimizer has no such hyper-parameter");
  bool isBeta = name == "beta1" || name == "beta2";
  if (!std::isfinite(value) || value < 0 || (isBeta && value >= 1)) {
    std::ostringstream os;
    os << flag << "=" << value << " is out of range ("
       << (isBeta ? "[0, 1)" : ">= 0") << ")";
    throw InputError(os.str());
  }
  if (name == "momentum" && value != 0 && t.momentum == 0)
    throw InputError("--momentum: the bundle was compiled without momentum "
                     "(no momentum buffer); recompile with --momentum");
  *it->second = value;
}

void TrainingSession::optimizerStep() {
  // The update itself is compiled into the stage (gpipe-append-optimizer);
  // the runtime sets this step's hyper-parameters.
  const TrainingSpec &t = bundle_.training;
  double step = static_cast<double>(steps + 1);
  char *oa = stage->arena(optimizerPhase);
  for (auto &[kind, slot] : hyper) {
    double value = 0;
    switch (kind) {
    case Hyper::LR:
      value = lr_;
      break;
    case Hyper::WeightDecay:
      value = t.weightDecay;
      break;
    case Hyper::Momentum:
      value = t.momentum;
      break;
    case Hyper::Beta1:
      value = t.beta1;
      break;
    case Hyper::Beta2:
      value = t.beta2;
      break;
    case Hyper::Eps:
      value = t.eps;
      break;
    case Hyper::StepSize:
      value = lr_ / (1 - std::pow(t.beta1, step));
      break;
    case Hyper::BiasCorrection2:
      value = std::sqrt(1 - std::pow(t.beta2, step));
      break;
    }
    float v = static_cast<float>(value);
    std::memcpy(oa + slot->offset, &v, sizeof(float));
  }
  stage->run(optimizerPhase);
}

HostTensor
TrainingSession::evaluate(const std::map<std::string, HostTensor> &microBatch) {
  if (!modelOutput)
    throw InputError("the model has no output besides its loss");
  char *arena = stage->arena(forwardPhase);
  for (const TensorSlot *slot : dataInputs()) {
    auto it = microBatch.find(slot->name);
    if (it == microBatch.end() ||
        static_cast<int64_t>(it->second.data.size()) != slot->byteSize())
      throw InputError("evaluation batch '" + slot->name +
                       "' must have the compiled micro-batch shape " +
                       std::to_string(slot->byteSize()) + " bytes");
    std::memcpy(arena + slot->offset, it->second.data.data(), slot->byteSize());
  }
  stage->setUpdateState(false);
  try {
    stage->run(forwardPhase);
  } catch (...) {
    stage->setUpdateState(true);
    throw;
  }
  stage->setUpdateState(true);
  HostTensor out;
  out.dtype = modelOutput->dtype;
  out.shape = modelOutput->shape;
  out.data.resize(modelOutput->byteSize());
  std::memcpy(out.data.data(), arena + modelOutput->offset,
              modelOutput->byteSize());
  return out;
}

std::map<std::string, HostTensor> TrainingSession::parameters() const {
  std::map<std::string, HostTensor> out;
  for (const TensorSlot *p : modelState()) {
    if (p->name.rfind("__", 0) == 0)
      continue; // optimizer state
    HostTensor t;
    t.dtype = p->dtype;
    t.shape = p->shape;
    t.data.resize(p->byteSize());
    std::memcpy(t.data.data(), stage->params() + p->offset, p->byteSize());
    out[p->name] = std::move(t);
  }
  return out;
}

std::vector<const TensorSlot *> TrainingSession::modelState() const {
  // Every tensor that changes: trained, updated by its op (BatchNorm's
  // running statistics) or optimizer state (`__opt.*`); not the constants
  // the compiler moved into the blob.
  std::vector<const TensorSlot *> out;
  for (const TensorSlot &p : bundle_.parameters)
    if (p.name.rfind("__constant_", 0) != 0)
      out.push_back(&p);
  return out;
}

} // namespace gpipe::runtime

namespace gpipe::runtime {

namespace {
constexpr char kCheckpointMagic[8] = {'G', 'P', 'C', 'K', 'P', 'T', '0', '3'};

template <typename T> void put(std::string &out, const T &v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(T));
}
} // namespace

void TrainingSession::saveCheckpoint(const std::string &path,
                                     uint64_t extra) const {
  std::string out(kCheckpointMagic, sizeof(kCheckpointMagic));
  put<uint32_t>(out, bundle_.paramsCrc32);
  put<int64_t>(out, steps);
  put<uint64_t>(out, extra);
  std::vector<const TensorSlot *> state = modelState();
  put<uint64_t>(out, state.size());
  for (const TensorSlot *p : state) {
    put<uint64_t>(out, p->byteSize());
    out.append(stage->params() + p->offset, p->byteSize());
  }
  put<uint32_t>(out, crc32Of(out.data(), out.size()));
  writeFileAtomically(path, out);
}

uint64_t TrainingSession::loadCheckpoint(const std::string &path) {
  std::optional<std::string> file = readFileBytes(path);
  if (!file)
    throw BundleError(path + ": cannot open the checkpoint");
  std::string &in = *file;
  size_t at = 0;
  auto fail = [&](const std::string &why) -> BundleError {
    return BundleError(path + ": " + why);
  };
  auto take = [&](size_t n) {
    if (n > in.size() - at)
      throw fail("truncated checkpoint");
    const char *p = in.data() + at;
    at += n;
    return p;
  };
  auto get = [&](auto &v) { std::memcpy(&v, take(sizeof(v)), sizeof(v)); };
  if (in.size() < sizeof(kCheckpointMagic) + 4 ||
      std::memcmp(in.data(), kCheckpointMagic, 6) != 0)
    throw fail("not a gpipe checkpoint");
  if (std::memcmp(in.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0)
    throw fail("checkpoint format " + in.substr(6, 2) +
               " of another gpipe version; this one reads format " +
               std::string(kCheckpointMagic + 6, 2) +
               " (train again without --resume)");
  uint32_t stored;
  std::memcpy(&stored, in.data() + in.size() - 4, 4);
  if (crc32Of(in.data(), in.size() - 4) != stored)
    throw fail("checksum mismatch (the checkpoint is corrupt)");
  in.resize(in.size() - 4);
  take(sizeof(kCheckpointMagic));
  uint32_t model;
  int64_t stepCount;
  uint64_t extra, count;
  get(model);
  get(stepCount);
  get(extra);
  get(count);
  std::vector<const TensorSlot *> state = modelState();
  auto otherModel = [&] {
    return fail("the checkpoint belongs to another model or bundle");
  };
  if (model != bundle_.paramsCrc32 || count != state.size())
    throw otherModel();
  for (const TensorSlot *p : state) {
    uint64_t bytes;
    get(bytes);
    if (bytes != static_cast<uint64_t>(p->byteSize()))
      throw otherModel();
    std::memcpy(stage->params() + p->offset, take(bytes), bytes);
  }

  steps = stepCount;
  return extra;
}

} // namespace gpipe::runtime
