#include "gpipe/runtime/Trainer.h"

#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/Idx.h"
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/Npy.h"
#include "gpipe/runtime/OnnxExport.h"
#include "gpipe/runtime/Progress.h"
#include "gpipe/runtime/RuntimeInfo.h"
#include "gpipe/runtime/TextData.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <numeric>
#include <random>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <set>
#include <sstream>
#include <unistd.h>

namespace gpipe::runtime {

namespace {

/// `rows` rows of `all`, row r taken from row rowOf(r).
template <typename RowOf>
HostTensor gatherRows(const HostTensor &all, int64_t rows, RowOf rowOf) {
  HostTensor t;
  t.dtype = all.dtype;
  t.shape.push_back(rows);
  for (size_t i = 1; i < all.shape.size(); ++i)
    t.shape.push_back(all.shape[i]);
  size_t row = all.data.size() / all.shape[0];
  t.data.resize(row * rows);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(t.data.data() + r * row, all.data.data() + rowOf(r) * row, row);
  return t;
}

/// An array's file, open for reading parts of it (ArrayInFile).
class RowFile {
public:
  explicit RowFile(const std::string &path)
      : path(path), fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0)
      throw InputError(path + ": cannot open: " + std::strerror(errno));
  }
  RowFile(const RowFile &) = delete;
  RowFile &operator=(const RowFile &) = delete;
  ~RowFile() { ::close(fd); }
  /// `n` bytes at `at` into `to`.
  void read(uint64_t at, size_t n, std::byte *to) const {
    while (n > 0) {
      ssize_t got = ::pread(fd, to, n, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        throw InputError(path + ": cannot read the data (" +
                         (got < 0 ? std::strerror(errno)
                                  : "the file is shorter than its arrays") +
                         ")");
      n -= static_cast<size_t>(got);
      at += static_cast<uint64_t>(got);
      to += got;
    }
  }

private:
  std::string path;
  int fd;
};

/// Bytes of one sample (one row along the first axis) of `a`.
size_t rowBytes(const ArrayInFile &a) {
  size_t row = dtypeSize(a.dtype);
  for (size_t i = 1; i < a.shape.size(); ++i)
    row *= static_cast<size_t>(a.shape[i]);
  return row;
}

/// Bytes of all of `a`.
int64_t fileArrayBytes(const ArrayInFile &a) {
  return a.shape.empty() ? 0 : static_cast<int64_t>(rowBytes(a)) * a.shape[0];
}

/// int32 values widened to int64, `n` of them, in place: `data` holds n
/// int32 values at its start and room for n int64.
void widenInPlace(std::byte *data, int64_t n) {
  // Last first, each value copied out before its wider slot is written
  // (memcpy: the two views of the bytes must not be assumed apart).
  for (int64_t i = n; i-- > 0;) {
    int32_t narrow;
    std::memcpy(&narrow, data + i * sizeof(int32_t), sizeof(narrow));
    int64_t wide = narrow;
    std::memcpy(data + i * sizeof(int64_t), &wide, sizeof(wide));
  }
}

/// `rows` rows of the array in `file`, row r read from row rowOf(r) (runs
/// of consecutive rows in one read), as `dtype` (int32 widened to int64).
template <typename RowOf>
HostTensor gatherFileRows(const ArrayInFile &a, const RowFile &file,
                          DType dtype, int64_t rows, RowOf rowOf) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = a.shape;
  t.shape[0] = rows;
  size_t row = rowBytes(a), wide = row / dtypeSize(a.dtype) * dtypeSize(dtype);
  t.data.resize(wide * rows);
  for (int64_t r = 0; r < rows;) {
    int64_t run = 1;
    while (r + run < rows && rowOf(r + run) == rowOf(r) + run)
      ++run;
    file.read(a.offset + static_cast<uint64_t>(rowOf(r)) * row, row * run,
              t.data.data() + r * wide);
    if (wide != row) // the run's values, read packed, widened in place
      widenInPlace(t.data.data() + r * wide,
                   run * static_cast<int64_t>(row / dtypeSize(a.dtype)));
    r += run;
  }
  return t;
}

/// The type a model input of `slot` takes `stored` as (int32 labels and
/// token ids widened to int64, keepLocalArrays).
DType takenAs(const TensorSlot &slot, DType stored) {
  return slot.dtype == DType::I64 && stored == DType::I32 ? DType::I64 : stored;
}

/// Plain text as byte-level language-modelling data: sequences as long as
/// the model's token input, labels the next bytes.
std::map<std::string, HostTensor> loadText(const std::string &path,
                                           TrainingSession &session) {
  const TensorSlot *tokens = nullptr, *labels = nullptr;
  for (const TensorSlot *slot : session.dataInputs())
    (slot->name == "labels" ? labels : tokens) = slot;
  auto isSequence = [](const TensorSlot *slot) {
    return slot && slot->dtype == DType::I64 && slot->shape.size() == 2;
  };
  for (const TensorSlot &slot : session.bundle().inputs)
    if (slot.dataBatchAxis != 0)
      throw InputError(path +
                       " is read as plain text, which feeds "
                       "batch-first language models only: '" +
                       slot.name + "' holds its samples on axis " +
                       std::to_string(slot.dataBatchAxis) +
                       " (give an .npz in the model's layout)");
  if (session.dataInputs().size() != 2 || !isSequence(tokens) ||
      !isSequence(labels) || labels->shape[1] != tokens->shape[1])
    throw InputError(path +
                     " is read as plain text (it is neither an .npz archive "
                     "nor a directory of IDX files), which needs a language "
                     "model: one input of int64 token ids [batch, T] and "
                     "labels [batch, T] (--loss=cross-entropy over [batch, "
                     "T, V] logits)");
  TokenDataset ds = readByteSequences(path, tokens->shape[1]);
  std::map<std::string, HostTensor> data;
  data[tokens->name] = std::move(ds.tokens);
  data["labels"] = std::move(ds.labels);
  return data;
}

/// The names of the data inputs this rank's stages read.
std::set<std::string> localNames(const TrainingSession &session) {
  std::set<std::string> names;
  for (const TensorSlot *slot : session.localDataInputs())
    names.insert(slot->name);
  return names;
}

/// A model of one input (besides labels) and an .npz of one array
/// (besides labels) under another name: that array is the input. A plain
/// torch.onnx.export names the input after its first node
/// ("onnx::Gemm_0"), which nobody names their arrays after.
void adoptTheOnlyInput(const std::string &path, TrainingSession &session,
                       TrainingData &set, int64_t streamAbove) {
  const TensorSlot *input = nullptr;
  for (const TensorSlot *slot : session.dataInputs())
    if (slot->name != "labels") {
      if (input)
        return; // several inputs: each by its name
      input = slot;
    }
  bool local = false;
  for (const TensorSlot *slot : session.localDataInputs())
    local |= input && slot->name == input->name;
  if (!input || !local || set.arrays.count(input->name) ||
      set.inFile.count(input->name))
    return;
  std::vector<std::string> others;
  for (const std::string &name : npzArrayNames(path))
    if (name != "labels")
      others.push_back(name);
  if (others.size() != 1)
    return;
  std::set<std::string> one = {others[0]};
  // The model's layout is on the bundle's inputs (the stages' slots are
  // batch-first): a sequence-first array is loaded, to be reordered.
  const TensorSlot *modelInput = session.bundle().input(input->name);
  if (streamAbove >= 0 && (!modelInput || modelInput->dataBatchAxis == 0)) {
    auto located = locateNpzArrays(path, one);
    auto it = located.find(others[0]);
    if (it != located.end() && fileArrayBytes(it->second) > streamAbove) {
      set.inFile[input->name] = it->second;
      return;
    }
  }
  std::map<std::string, HostTensor> read = readNpz(path, &one);
  set.arrays[input->name] = std::move(read.at(others[0]));
}

/// Keeps the arrays this rank's stages read (across ranks the first
/// stage's ranks hold the inputs, the last stage's the labels), int32
/// labels and token ids widened to the model's int64.
void keepLocalArrays(TrainingSession &session,
                     std::map<std::string, HostTensor> &data) {
  std::set<std::string> wanted = localNames(session);
  for (auto it = data.begin(); it != data.end();)
    it = wanted.count(it->first) ? std::next(it) : data.erase(it);
  // Labels and token ids come as int32 as often as int64 (NumPy's default
  // integer on some platforms, torch.int): widened to the model's int64.
  for (const TensorSlot *slot : session.localDataInputs()) {
    auto it = data.find(slot->name);
    if (it == data.end() ||
        takenAs(*slot, it->second.dtype) == it->second.dtype)
      continue;
    HostTensor &t = it->second;
    t.data.resize(t.numElements() * sizeof(int64_t));
    widenInPlace(t.data.data(), t.numElements());
    t.dtype = DType::I64;
  }
}

/// The same for a data set, its arrays in the file too.
void keepLocalArrays(TrainingSession &session, TrainingData &set) {
  keepLocalArrays(session, set.arrays);
  std::set<std::string> wanted = localNames(session);
  for (auto it = set.inFile.begin(); it != set.inFile.end();)
    it = wanted.count(it->first) ? std::next(it) : set.inFile.erase(it);
}

/// Bytes of the arrays of a data set.
int64_t arrayBytes(const TrainingData &set) {
  int64_t bytes = 0;
  for (const auto &entry : set.arrays)
    bytes += static_cast<int64_t>(entry.second.data.size());
  return bytes;
}

/// Checks the arrays this rank's stages read against the model's inputs
/// and returns how many samples they hold, the same on every rank (rank 0
/// holds the first stage's inputs; a rank whose arrays disagree fails).
int64_t sampleCount(TrainingSession &session, const TrainingData &set) {
  const std::map<std::string, HostTensor> &data = set.arrays;
  const std::string &path = set.source;
  int64_t samples = -1;
  for (const TensorSlot *slot : session.localDataInputs()) {
    auto it = data.find(slot->name);
    HostTensor view; // an array in the file: its type and shape
    if (it == data.end()) {
      auto f = set.inFile.find(slot->name);
      if (f != set.inFile.end()) {
        view.dtype = takenAs(*slot, f->second.dtype);
        view.shape = f->second.shape;
      }
    }
    if (it == data.end() && view.shape.empty()) {
      std::string has;
      for (const std::string &name : set.names)
        has += (has.empty() ? "" : ", ") + ("'" + name + "'");
      throw InputError(path + ": no array '" + slot->name +
                       "' (one array per model input, named like the "
                       "input, and 'labels')" +
                       (has.empty() ? std::string() : "; the data has " + has));
    }
    const HostTensor &t = it != data.end() ? it->second : view;
    if (t.shape.empty() || t.shape[0] == 0 ||
        (samples >= 0 && t.shape[0] != samples) ||
        !session.holdsSamples(*slot, t, t.shape[0])) {
      // In the model's layout, as the user gave it (moveSamplesFirst).
      const TensorSlot *input = session.bundle().input(slot->name);
      int64_t axis = input ? input->dataBatchAxis : 0;
      HostTensor given;
      given.dtype = t.dtype;
      given.shape = t.shape;
      if (axis > 0 && axis < int64_t(t.shape.size())) {
        given.shape.erase(given.shape.begin());
        given.shape.insert(given.shape.begin() + axis, t.shape[0]);
      }
      throw InputError(
          path + ": array '" + slot->name + "' is " + given.describe() +
          ", expected " + (input ? *input : *slot).describeData() +
          " (N samples" +
          (samples >= 0
               ? ", as many as the other arrays: " + std::to_string(samples)
               : std::string()) +
          ")" +
          (slot->name == "labels"
               ? " holding the labels (or [N, T] for logits of T rows a "
                 "sample, viewed [N*T, C])"
               : ""));
    }
    samples = t.shape[0];
  }
  double first = session.fromRankZero(static_cast<double>(samples));
  if (samples >= 0 && static_cast<double>(samples) != first)
    throw InputError(path + ": rank " + std::to_string(session.rank()) +
                     "'s arrays have " + std::to_string(samples) +
                     " rows, rank 0's " +
                     std::to_string(static_cast<int64_t>(first)));
  return static_cast<int64_t>(first);
}

/// Class labels must index the logits: checked before training starts.
/// Checks `n` labels, the first of them labels[first].
void checkLabelValues(const TrainingSession &session, const int64_t *l,
                      int64_t n, int64_t first, const std::string &source) {
  int64_t classes = session.classCount();
  int64_t ignored = session.bundle().training.ignoreIndex;
  for (int64_t i = 0; i < n; ++i)
    if (l[i] != ignored && (l[i] < 0 || l[i] >= classes))
      throw InputError(source + ": labels[" + std::to_string(first + i) +
                       "] = " + std::to_string(l[i]) + " is outside [0, " +
                       std::to_string(classes) +
                       ") and is not the ignore "
                       "index " +
                       std::to_string(ignored));
}

bool labelsIndexClasses(const TrainingSession &session) {
  return session.classCount() > 0 &&
         session.bundle().training.loss == "cross-entropy";
}

void checkLabels(TrainingSession &session,
                 const std::map<std::string, HostTensor> &data,
                 const std::string &source) {
  auto it = data.find("labels");
  if (it == data.end() || it->second.dtype != DType::I64 ||
      !labelsIndexClasses(session))
    return;
  checkLabelValues(session,
                   reinterpret_cast<const int64_t *>(it->second.data.data()),
                   it->second.numElements(), 0, source);
}

/// The same for a data set: labels in the file are read a piece at a time.
void checkLabels(TrainingSession &session, const TrainingData &set) {
  checkLabels(session, set.arrays, set.source);
  auto it = set.inFile.find("labels");
  if (it == set.inFile.end() || !labelsIndexClasses(session))
    return;
  const ArrayInFile &a = it->second;
  if (a.dtype != DType::I64 && a.dtype != DType::I32)
    return;
  int64_t count = 1;
  for (int64_t d : a.shape)
    count *= d;
  RowFile file(a.path);
  size_t size = dtypeSize(a.dtype);
  std::vector<std::byte> piece(sizeof(int64_t) << 17);
  for (int64_t first = 0; first < count; first += int64_t(1) << 17) {
    int64_t n = std::min<int64_t>(count - first, int64_t(1) << 17);
    file.read(a.offset + static_cast<uint64_t>(first) * size, n * size,
              piece.data());
    if (a.dtype == DType::I32)
      widenInPlace(piece.data(), n);
    checkLabelValues(session, reinterpret_cast<const int64_t *>(piece.data()),
                     n, first, set.source);
  }
}

/// Accuracy of the model's class predictions on a labelled data set, and
/// the mean cross-entropy of its logits, run in micro-batches (the last
/// one padded).
Evaluation evaluate(TrainingSession &session,
                    const std::map<std::string, HostTensor> &data, int64_t n) {
  int64_t b = session.microBatchSize(), correct = 0;
  // Labels given [outer..., N, inner...] (a sequence-first model's): the
  // logits' rows in that order, `inner` consecutive ones of a sample.
  std::optional<int64_t> labelsInner;
  const TensorSlot *labelSlot = session.bundle().input("labels");
  if (labelSlot && labelSlot->dataBatchAxis > 0) {
    labelsInner = 1;
    for (size_t i = labelSlot->dataBatchAxis + 1; i < labelSlot->shape.size();
         ++i)
      *labelsInner *= labelSlot->shape[i];
  }
  double rows = 0;
  double lossSum = 0;
  for (int64_t first = 0; first < n; first += b) {
    std::map<std::string, HostTensor> batch;
    for (const TensorSlot *slot : session.localDataInputs()) {
      batch[slot->name] = gatherRows(data.at(slot->name), b, [&](int64_t r) {
        return std::min(first + r, n - 1); // the last batch repeats a row
      });
    }
    HostTensor logits = session.evaluate(batch);
    if (logits.data.empty())
      continue; // the model's output is on another rank
    if (logits.dtype != DType::F32 || logits.shape.size() != 2)
      throw InputError("accuracy needs [N, C] float32 logits");
    // The last stage's rank, which reads the labels.
    const int64_t *label =
        reinterpret_cast<const int64_t *>(data.at("labels").data.data());
    int64_t classes = logits.shape[1];
    // Rows a sample: 1, or T for per-token logits viewed [B*T, C] (the
    // labels then [N, T], row-major like the logits), or of a
    // sequence-first model's [T*B, C], T outside the batch (the labels
    // [N, T] once their samples are first): row r is token (r / (b *
    // inner)) * inner + r % inner of sample (r / inner) % b.
    int64_t perSample = std::max<int64_t>(1, logits.shape[0] / b);
    int64_t inner = labelsInner.value_or(perSample);
    const float *l = reinterpret_cast<const float *>(logits.data.data());
    for (int64_t r = 0; r < b * perSample; ++r) {
      int64_t sample = (r / inner) % b,
              token = r / (b * inner) * inner + r % inner;
      if (first + sample >= n)
        continue; // a row repeated to fill the last batch
      const float *row = l + r * classes;
      int64_t want = label[(first + sample) * perSample + token];
      ++rows;
      correct += std::max_element(row, row + classes) - row == want;
      // -log softmax(row)[want], in double: max + log(sum(exp(x - max))).
      double top = *std::max_element(row, row + classes), sum = 0;
      for (int64_t c = 0; c < classes; ++c)
        sum += std::exp(double(row[c]) - top);
      if (want >= 0 && want < classes)
        lossSum += top + std::log(sum) - double(row[want]);
    }
  }
  Evaluation e;
  e.samples = n;
  // Per logits row: per sample, or per token of per-token logits.
  double counted = std::max(1.0, session.fromLastStage(rows));
  e.accuracy = session.fromLastStage(static_cast<double>(correct)) / counted;
  e.loss = session.fromLastStage(lossSum) / counted;
  if (session.bundle().training.loss != "cross-entropy")
    e.loss = std::numeric_limits<double>::quiet_NaN();
  return e;
}

/// After --profile-ops: the model's ops' measured time per micro-batch
/// (forward + backward) against the compiler's prediction, summed (what of
/// a step's miss is in the ops, not the runtime's parts), and the ops
/// furthest from theirs, at most `count`, each with both and their ratio,
/// so that a step off its prediction shows where.
void printOpPredictions(
    std::ostream &out, const ScheduleSpec &schedule,
    const std::map<std::string, std::pair<double, double>> &measured,
    size_t count = 5) {
  struct Row {
    std::string op;
    double measured, predicted;
  };
  // The ops of one ONNX node share a name, within a stage or across a
  // cut: their predictions add up, as their measured times do.
  std::map<std::string, double> predicted;
  for (const StreamSpec &stream : schedule.streams)
    for (const StreamSpec::PredictedOp &p : stream.predictedOps)
      predicted[p.op] += p.forward + p.backward;
  std::vector<Row> rows;
  double measuredSum = 0, predictedSum = 0;
  for (const auto &[op, seconds] : predicted)
    if (auto it = measured.find(op); it != measured.end()) {
      rows.push_back({op, it->second.first + it->second.second, seconds});
      measuredSum += rows.back().measured;
      predictedSum += seconds;
    }
  if (rows.empty())
    return;
  std::sort(rows.begin(), rows.end(), [](const Row &a, const Row &b) {
    return std::abs(a.measured - a.predicted) >
           std::abs(b.measured - b.predicted);
  });
  rows.resize(std::min(rows.size(), count));
  std::ostringstream line;
  line << std::fixed << std::setprecision(3)
       << "  the model's ops: " << measuredSum * 1e3
       << " ms a micro-batch measured, " << predictedSum * 1e3
       << " predicted (forward + backward, every stage's)\n"
       << "  ops furthest from their prediction (ms a micro-batch, forward + "
          "backward, measured against predicted):";
  const char *sep = " ";
  for (const Row &r : rows) {
    line << sep << r.op << " " << std::setprecision(3) << r.measured * 1e3
         << " against " << r.predicted * 1e3;
    if (r.predicted > 0)
      line << " (" << std::setprecision(2) << r.measured / r.predicted << "x)";
    sep = "; ";
  }
  out << line.str() << "\n";
}

/// Seconds of work the compiler predicted for `stage` in one step: its
/// forward, backward (both parts of a split one), recompute and optimizer
/// boxes.
double predictedBusySeconds(const ScheduleSpec &schedule, int64_t stage) {
  double busy = 0;
  for (const StreamSpec &stream : schedule.streams)
    if (stream.stage == stage)
      for (const TimelineBox &box : stream.predictedTimeline)
        if (box.kind == "forward" || box.kind == "backward" ||
            box.kind == "backward_weight" || box.kind == "recompute" ||
            box.kind == "optimizer")
          busy += box.end - box.begin;
  return busy;
}

/// The pipeline's measured step, bubble and memory against the compiler's
/// prediction; `dataBytes`: the data sets the run holds.
void printSummary(const TrainingSession &session, int64_t dataBytes,
                  std::ostream &out) {
  TrainingSession::Stats s = session.stats();
  if (s.steps == 0)
    return;
  const ScheduleSpec &schedule = session.bundle().schedule;
  double step = s.stepSeconds / static_cast<double>(s.steps);
  auto mib = [](int64_t bytes) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(1)
       << static_cast<double>(bytes) / (1 << 20) << " MiB";
    return os.str();
  };
  int64_t ranks = session.rankCount();
  out << std::fixed << std::setprecision(2)
      << "pipeline: " << session.bundle().stages.size() << " stage(s)";
  if (ranks > 1)
    out << " on " << ranks << " ranks (rank " << session.rank()
        << "'s stages below)";
  out << ", " << schedule.kind << " schedule, " << schedule.microBatches
      << " micro-batches\n";
  for (const auto &st : s.stages) {
    out << "  stage " << st.index;
    if (ranks > 1)
      out << " on rank " << st.rank << ",";
    out << " on " << st.device << ": busy "
        << 100.0 * st.busySeconds / s.stepSeconds << "% of the steps ("
        << st.busySeconds / static_cast<double>(s.steps) * 1e3 << " ms a step";
    if (double predicted = predictedBusySeconds(schedule, st.index);
        predicted > 0)
      out << ", " << predicted * 1e3 << " predicted";
    out << "), " << mib(st.allocatedBytes) << " allocated (predicted peak "
        << mib(st.predictedPeakBytes) << ")\n";
    if (!st.profiledParts.empty()) {
      // --profile-ops: the whole step, part by part (the same parts as the
      // table's "(runtime)" rows beside the ops').
      out << "    profiled step " << st.profiledStepSeconds * 1e3 << " ms:";
      const char *sep = " ";
      for (const auto &p : st.profiledParts) {
        out << sep << p.name << " " << (p.forward + p.backward) * 1e3;
        sep = ", ";
      }
      out << "\n";
    }
    if (st.allReduceSeconds > 0) {
      double n = static_cast<double>(s.steps);
      out << "    gradient all-reduce " << st.allReduceSeconds / n * 1e3
          << " ms per step, " << st.allReduceWaitSeconds / n * 1e3
          << " ms of it waited at the optimizer step ("
          << 100.0 * (1 - st.allReduceWaitSeconds / st.allReduceSeconds)
          << "% overlapped)\n";
    }
  }
  // The process's memory, part by part (every rank's on rank 0).
  for (const TrainingSession::MemoryAccount &m :
       session.memoryAccounts(dataBytes)) {
    if (m.peak <= 0)
      continue; // no /proc here
    out << "  memory";
    if (ranks > 1)
      out << " of rank " << m.rank;
    out << ": process peak " << mib(m.peak) << " = stages' plan " << mib(m.plan)
        << " + kernels' buffers " << mib(m.kernels) << " + data " << mib(m.data)
        << " + the process before loading " << mib(m.start) << " + other "
        << mib(m.other()) << " (threads, libraries' code and caches)\n";
  }
  out << "  step " << s.medianStepSeconds * 1e3 << " ms measured (median of "
      << s.medianSteps << " steps; mean " << step * 1e3 << "), "
      << s.predictedStepSeconds * 1e3 << " ms predicted; bubble "
      << 100.0 * s.medianBubble << "% measured (median; over all steps "
      << 100.0 * s.bubble() << "%), " << 100.0 * s.predictedBubble
      << "% predicted\n";
  // The compiler chose the plan by its prediction: say when this run does
  // not bear it out (a few steps include the first touches of memory).
  double ratio = s.predictedStepSeconds > 0
                     ? s.medianStepSeconds / s.predictedStepSeconds
                     : 1;
  if (s.steps >= 5 && (ratio > 1.25 || ratio < 0.8))
    out << "  warning: the step took " << ratio
        << "x the predicted time: the cost model's figures do not describe "
           "this run (a busy machine, or figures of another one). On a "
           "quiet machine, measure them (gpipe-opt --calibrate -o "
           "profile.json, then compile with --device-profile=profile.json), "
           "or give the compiler this model's op times (gpipe-run "
           "--profile-ops=ops.csv, then gpipe-opt --cost-table=ops.csv)\n";
  // Which of the two: the machine's pace now against the profile's.
  bool cpu = std::any_of(s.stages.begin(), s.stages.end(), [](const auto &st) {
    return st.device.rfind("cpu", 0) == 0;
  });
  if (s.steps >= 5 && (ratio > 1.25 || ratio < 0.8) && cpu &&
      schedule.profileGflopsPerCore > 0) {
    double now = cpuSgemmGflops(), pace = now / schedule.profileGflopsPerCore;
    out << "  one core's sgemm runs at " << now
        << " GFLOP/s on this machine now, against "
        << schedule.profileGflopsPerCore
        << " in the device profile the prediction used (" << pace << "x)";
    if (std::abs(pace - 1) > 0.15)
      out << ": the machine runs at another pace than the one the profile "
             "describes (other work on it, a shared host's busy spell, or "
             "another machine's profile)\n";
    else
      out << ": the machine is as fast as its profile says; the cost model "
             "misjudges this model's kernels: give the compiler their times "
             "(--profile-ops, --cost-table)\n";
  }
  out << std::defaultfloat << std::setprecision(6);
}

/// The step of a loss-log row ("12,2.3"), or -1.
int64_t stepOfCsvLine(const std::string &line) {
  char *end = nullptr;
  long long step = std::strtoll(line.c_str(), &end, 10);
  return end != line.c_str() && *end == ',' ? step : -1;
}

/// The "step" of a metrics line, or -1.
int64_t stepOfJsonLine(const std::string &line) {
  nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
  return row.is_object() && row.contains("step") && row["step"].is_number()
             ? row["step"].get<int64_t>()
             : -1;
}

/// Opens a per-step log (`flag` names it in errors; "" = none). A resumed
/// run keeps the rows of the steps up to `firstStep` and drops the later
/// ones (the steps it trains again); otherwise the log starts with
/// `header`.
std::ofstream openStepLog(const std::string &path, const std::string &flag,
                          int64_t firstStep, const std::string &header,
                          int64_t (*stepOf)(const std::string &)) {
  std::ofstream log;
  if (path.empty())
    return log;
  std::string kept = header;
  if (firstStep > 0 && std::filesystem::exists(path)) {
    std::ifstream old(path);
    std::string line;
    bool first = true;
    while (std::getline(old, line)) {
      bool isHeader = first && !header.empty();
      first = false;
      if (isHeader)
        continue;
      int64_t step = stepOf(line);
      if (step >= 0 && step <= firstStep)
        kept += line + "\n";
    }
  }
  // The rows kept replace the old log atomically (a failed write leaves
  // it whole); the run's rows are appended.
  writeFileAtomically(path, kept);
  log.open(path, std::ios::app);
  if (!log)
    throw InputError("cannot write " + flag + " file '" + path + "'");
  return log;
}

/// A per-step log's row, written: a full disk or a vanished directory is
/// an error that names the log, not a log that silently stops.
void checkLogWrite(std::ofstream &log, const std::string &flag,
                   const std::string &path) {
  if (log)
    return;
  int error = errno;
  throw FileWriteError(
      flag + " " + path + ": write failed" +
      (error ? std::string(": ") + std::strerror(error) : std::string()));
}

} // namespace

void moveSamplesFirst(const TrainingSession &session,
                      std::map<std::string, HostTensor> &data,
                      const std::string &source) {
  for (const TensorSlot &slot : session.bundle().inputs) {
    int64_t axis = slot.dataBatchAxis;
    auto it = data.find(slot.name);
    if (axis == 0 || it == data.end())
      continue;
    HostTensor &t = it->second;
    if (!slot.holdsData(t.shape) || t.shape[axis] == 0)
      throw InputError(source + ": array '" + slot.name + "' is " +
                       t.describe() + ", expected " + slot.describeData() +
                       " (the model's layout: N samples on axis " +
                       std::to_string(axis) + ")");
    t = moveAxisToFront(t, axis);
  }
}

TrainingData loadTrainingData(const std::string &path, const std::string &split,
                              TrainingSession &session, int64_t streamAbove) {
  TrainingData set;
  set.source = path;
  std::map<std::string, HostTensor> &data = set.arrays;
  if (!std::filesystem::is_directory(path)) {
    if (!std::filesystem::exists(path))
      throw InputError(path + ": no such file or directory");
    bool npzName = std::filesystem::path(path).extension() == ".npz";
    bool npz = npzName || isZipFile(path);
    if (npz) {
      std::set<std::string> wanted = localNames(session);
      if (streamAbove >= 0) {
        // Arrays over streamAbove bytes, stored, samples first: left in
        // the file (a sequence-first array is reordered when loaded).
        for (auto &[name, array] : locateNpzArrays(path, wanted)) {
          const TensorSlot *input = session.bundle().input(name);
          if (input && input->dataBatchAxis != 0)
            continue;
          if (!array.shape.empty() && fileArrayBytes(array) > streamAbove) {
            set.inFile[name] = array;
            wanted.erase(name);
          }
        }
      }
      data = readNpz(path, &wanted);
      set.names = npzArrayNames(path);
      adoptTheOnlyInput(path, session, set, streamAbove);
    } else {
      data = loadText(path, session);
    }
  } else {
    ImageDataset ds = readIdxDataset(path, split);
    for (const TensorSlot *slot : session.dataInputs())
      if (slot->name != "labels") {
        data[slot->name] = std::move(ds.images);
        break;
      }
    data["labels"] = std::move(ds.labels);
  }
  if (set.names.empty())
    for (auto &[name, array] : data)
      set.names.push_back(name);
  keepLocalArrays(session, set);
  return set;
}

int64_t streamDataThreshold(const std::string &mode) {
  if (mode == "auto")
    return TrainerOptions{}.streamDataAbove;
  if (mode == "always")
    return 0;
  if (mode == "never")
    return -1;
  throw InputError("--stream-data must be auto, always or never, not '" + mode +
                   "'");
}

double scheduledLearningRate(const TrainerOptions &o, double base, int64_t step,
                             int64_t steps) {
  if (step < o.warmupSteps)
    return base * static_cast<double>(step + 1) /
           static_cast<double>(o.warmupSteps);
  int64_t t = step - o.warmupSteps,
          span = std::max<int64_t>(1, steps - o.warmupSteps);
  if (o.lrSchedule == "step")
    return base * std::pow(o.lrGamma, static_cast<double>(t / o.lrStepSize));
  if (o.lrSchedule == "cosine")
    return base * 0.5 *
           (1 + std::cos(M_PI * static_cast<double>(t) /
                         static_cast<double>(span)));
  return base;
}

TrainingResult runTrainer(TrainingSession &session, const TrainerOptions &o,
                          std::ostream &out) {
  if (o.data.empty())
    throw InputError("--train needs --data=FILE.npz, a directory of IDX "
                     "files or a plain-text file (byte-level language "
                     "models)");
  TrainingData data =
      loadTrainingData(o.data, "train", session, o.streamDataAbove);
  std::optional<TrainingData> evalData;
  if (!o.evalData.empty())
    evalData = loadTrainingData(o.evalData, "t10k", session);
  return runTrainer(session, o, out, std::move(data), std::move(evalData));
}

namespace {

/// Pins the calling thread to `cores` while it lives (none: left as it
/// is), then gives it back the cores it had: the training loop waits for
/// each step on the first stage's cores (TrainingSession::driverCores).
class PinnedCaller {
public:
  explicit PinnedCaller(const std::vector<int> &cores) {
    if (cores.empty() ||
        pthread_getaffinity_np(pthread_self(), sizeof(before), &before) != 0)
      return;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores)
      CPU_SET(c, &set);
    pinned = pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
  }
  ~PinnedCaller() {
    if (pinned)
      pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
  }
  PinnedCaller(const PinnedCaller &) = delete;
  PinnedCaller &operator=(const PinnedCaller &) = delete;

private:
  cpu_set_t before;
  bool pinned = false;
};

/// A data set in memory: each pass over it in an order drawn from the seed
/// and the pass (resumed runs see the same order), or in the data's order;
/// with data parallelism each step takes a global batch of D x the
/// compiled batch, replica r its r-th slice of it.
class ArraySource : public BatchSource {
public:
  ArraySource(TrainingSession &session, TrainingData data, unsigned seed,
              bool shuffle)
      : session(session), data(std::move(data)), seed(seed), shuffle(shuffle) {
    keepLocalArrays(session, this->data);
    moveSamplesFirst(session, this->data.arrays, this->data.source);
    checkLabels(session, this->data);
    samples = sampleCount(session, this->data);
    for (auto &[name, array] : this->data.inFile)
      files.emplace(name, std::make_unique<RowFile>(array.path));
    batchRows = session.batchSize() * session.replicas();
    order.resize(samples);
    std::iota(order.begin(), order.end(), 0);
  }
  std::string describe() const override { return data.source; }
  bool checked() const override { return true; } // all of it, at load
  int64_t heldBytes() const override { return arrayBytes(data); }
  int64_t stepsPerEpoch() const override {
    return std::max<int64_t>(1, samples / batchRows);
  }
  std::map<std::string, HostTensor> batch(int64_t step) override {
    int64_t first = step * batchRows;
    // A new pass over the data gets its own permutation (a function of
    // the seed and the pass only).
    if (shuffle && first / samples != pass) {
      pass = first / samples;
      std::iota(order.begin(), order.end(), 0);
      std::mt19937 rng(seed + static_cast<unsigned>(pass));
      std::shuffle(order.begin(), order.end(), rng);
    }
    int64_t replicaRows = session.batchSize();
    int64_t replicaFirst = session.replica() * replicaRows;
    std::map<std::string, HostTensor> mini;
    auto rowOf = [&](int64_t r) {
      return order[(first + replicaFirst + r) % samples];
    };
    for (const TensorSlot *slot : session.localDataInputs()) {
      auto in = data.inFile.find(slot->name);
      mini[slot->name] =
          in == data.inFile.end()
              ? gatherRows(data.arrays.at(slot->name), replicaRows, rowOf)
              : gatherFileRows(in->second, *files.at(slot->name),
                               takenAs(*slot, in->second.dtype), replicaRows,
                               rowOf);
    }
    return mini;
  }

private:
  TrainingSession &session;
  TrainingData data;
  unsigned seed;
  bool shuffle;
  int64_t samples = 0, batchRows = 0, pass = -1;
  std::vector<int64_t> order;
  /// The files of the arrays left in them, open for the run.
  std::map<std::string, std::unique_ptr<RowFile>> files;
};

} // namespace

TrainingResult runTrainer(TrainingSession &session, const TrainerOptions &o,
                          std::ostream &out, TrainingData train,
                          std::optional<TrainingData> eval) {
  // The data's errors before the bundle's warnings, as they always were.
  ArraySource source(session, std::move(train), o.seed, !o.noShuffle);
  return runTrainer(session, o, out, source, std::move(eval));
}

TrainingResult runTrainer(TrainingSession &session, const TrainerOptions &o,
                          std::ostream &out, BatchSource &train,
                          std::optional<TrainingData> eval) {
  TrainingResult result;
  {
    for (const std::string &w : session.placementWarnings())
      out << "warning: " << w << "\n";
    session.setRandomSeed(o.seed);
    if (!o.trace.empty() || !o.report.empty())
      session.enableTrace();
    if (!o.profileOps.empty())
      session.enableOpProfile();
    for (auto &[name, value] : o.hyper)
      session.setHyperParameter(name, value);
    if (o.lr >= 0)
      session.setLearningRate(o.lr);
    double baseLr = session.learningRate();
    if (o.lrSchedule != "constant" && o.lrSchedule != "step" &&
        o.lrSchedule != "cosine")
      throw InputError("--lr-schedule must be constant, step or cosine");
    if (o.lrSchedule == "step" && o.lrStepSize <= 0)
      throw InputError("--lr-schedule=step needs --lr-step-size=N");
    if (eval) {
      keepLocalArrays(session, eval->arrays);
      moveSamplesFirst(session, eval->arrays, eval->source);
      checkLabels(session, eval->arrays, eval->source);
    }
    int64_t evalSamples = eval ? sampleCount(session, *eval) : 0;
    int64_t batch = session.batchSize() * session.replicas();
    int64_t perEpoch = train.stepsPerEpoch();
    if (perEpoch <= 0 && o.steps <= 0)
      throw InputError(train.describe() +
                       ": its length is not known: give a number of steps");
    perEpoch = perEpoch > 0 ? perEpoch : o.steps;
    int64_t steps =
        o.steps > 0 ? o.steps : std::max<int64_t>(1, o.epochs) * perEpoch;
    const std::string &checkpoint = o.checkpointDir;
    int64_t firstStep = 0;
    if (o.resume) {
      if (checkpoint.empty())
        throw InputError("--resume needs --checkpoint-dir");
      if (std::optional<uint64_t> seed = session.loadCheckpoint(checkpoint)) {
        if (*seed != o.seed)
          throw InputError("--seed differs from the checkpoint's (" +
                           std::to_string(*seed) + ")");
        firstStep = session.stepsTaken();
        if (firstStep > steps)
          throw InputError(
              "--resume: the checkpoint in " + checkpoint + " is after step " +
              std::to_string(firstStep) + ", and this run trains " +
              std::to_string(steps) +
              " steps: nothing left to train (raise --steps or --epochs)");
        out << "resumed from " << checkpoint << " after step " << firstStep;
        // A run stopped after its last checkpoint but before its outputs
        // (killed, out of time) ends now: its outputs are written.
        if (firstStep == steps)
          out << ", the run's last: nothing left to train; writing its "
                 "outputs";
        out << "\n";
      } else {
        out << "--resume: no checkpoint in " << checkpoint
            << " yet: training from the first step\n";
      }
    }
    // A resumed run continues the logs of the steps it keeps.
    std::ofstream lossLog = openStepLog(o.lossLog, "--loss-log", firstStep,
                                        "step,loss\n", stepOfCsvLine);
    std::ofstream metrics =
        openStepLog(o.metrics, "--metrics", firstStep, "", stepOfJsonLine);
    auto start = std::chrono::steady_clock::now();
    std::optional<double> lrOverride; // set by onStep
    // Sequence models (labels [batch, T, ...]) count tokens, not samples.
    int64_t tokensPerSample = 1;
    for (const TensorSlot *slot : session.dataInputs())
      if (slot->name == "labels")
        for (size_t i = 1; i < slot->shape.size(); ++i)
          tokensPerSample *= slot->shape[i];
    Progress::Config display;
    display.firstStep = firstStep;
    display.steps = steps;
    display.stepsPerEpoch = perEpoch;
    display.itemsPerStep = batch * tokensPerSample;
    display.unit = tokensPerSample > 1 ? "tokens" : "samples";
    display.terminal = o.terminal;
    display.columns = o.columns;
    display.lineEvery = std::max<int64_t>(1, perEpoch / 10);
    bool finished = firstStep == steps; // resumed at its last step
    std::optional<Progress> progress;
    if (!finished)
      progress.emplace(out, display);
    double seconds = 0;
    // The steps' hand-offs on one core (TrainingSession::driverCores); the
    // loop's own work between steps runs while every stage waits.
    std::optional<PinnedCaller> pinned;
    pinned.emplace(session.driverCores());
    for (int64_t step = firstStep; step < steps; ++step) {
      session.setLearningRate(
          lrOverride ? *lrOverride
                     : scheduledLearningRate(o, baseLr, step, steps));
      // Batches a caller makes are widened and checked as arrays are.
      std::map<std::string, HostTensor> mini = train.batch(step);
      if (!train.checked()) {
        std::string where =
            train.describe() + " (step " + std::to_string(step + 1) + ")";
        keepLocalArrays(session, mini);
        moveSamplesFirst(session, mini, where);
        checkLabels(session, mini, where);
      }
      double loss = session.step(mini);
      result.losses.push_back(loss);
      // The first step creates caches and touches memory: not profiled.
      if (!o.profileOps.empty() && step == firstStep && steps - firstStep > 1)
        session.enableOpProfile();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              start)
                    .count();
      int64_t epoch = step / perEpoch + 1;
      double lr = session.learningRate();
      progress->update(step, loss, lr, seconds);
      if (metrics.is_open()) {
        metrics << nlohmann::json{{"step", step + 1},
                                  {"epoch", epoch},
                                  {"loss", loss},
                                  {"lr", lr},
                                  {display.unit + "_per_s",
                                   progress->rate(seconds)},
                                  {"time_s", seconds}}
                       .dump()
                << std::endl;
        checkLogWrite(metrics, "--metrics", o.metrics);
      }
      if (lossLog.is_open()) {
        // Every digit: logs of two runs compare bit for bit.
        lossLog << step + 1 << ","
                << std::setprecision(std::numeric_limits<double>::max_digits10)
                << loss << std::endl;
        checkLogWrite(lossLog, "--loss-log", o.lossLog);
      }
      bool checkpointed =
          !checkpoint.empty() &&
          ((o.checkpointEvery > 0 && (step + 1) % o.checkpointEvery == 0) ||
           step + 1 == steps);
      if (checkpointed)
        session.saveCheckpoint(checkpoint, o.seed);
      bool epochEnd = (step + 1) % perEpoch == 0 || step + 1 == steps;
      if (epochEnd && eval) {
        Evaluation e = evaluate(session, eval->arrays, evalSamples);
        e.epoch = (step + 1 + perEpoch - 1) / perEpoch;
        e.step = step + 1;
        result.evaluations.push_back(e);
        progress->interrupt();
        out << "epoch " << e.epoch << ": test accuracy " << 100.0 * e.accuracy
            << "%";
        if (std::isfinite(e.loss))
          out << ", loss " << e.loss;
        out << " on " << evalSamples << " samples\n" << std::flush;
        if (metrics.is_open()) {
          nlohmann::json line{{"step", step + 1},
                              {"epoch", epoch},
                              {"eval_accuracy", e.accuracy},
                              {"eval_samples", evalSamples},
                              {"time_s", seconds}};
          if (std::isfinite(e.loss))
            line["eval_loss"] = e.loss;
          metrics << line.dump() << std::endl;
          checkLogWrite(metrics, "--metrics", o.metrics);
        }
      }
      if (o.onStep) {
        StepInfo info{step + 1, loss, lr, false};
        o.onStep(info);
        if (info.lr != lr)
          lrOverride = info.lr;
        if (info.stop && step + 1 < steps) {
          result.stopped = true;
          out << "stopped after step " << step + 1 << "\n";
          if (!checkpoint.empty() && !checkpointed)
            session.saveCheckpoint(checkpoint, o.seed);
          break;
        }
      }
    }
    pinned.reset();
    if (progress)
      progress->finish();
    // The next run (a Python caller's next train()) starts from this
    // run's base rate, not from where a schedule left it.
    session.setLearningRate(lrOverride ? *lrOverride : baseLr);
    result.seconds = seconds;
    result.itemsPerSecond = progress ? progress->rate(seconds) : 0;
    // What measures the run's steps: none when it had none to take.
    std::ostringstream summary;
    if (!finished)
      printSummary(session, train.heldBytes() + (eval ? arrayBytes(*eval) : 0),
                   summary);
    out << summary.str();
    if (!o.report.empty() && !finished) {
      session.writeReport(
          o.report,
          std::filesystem::path(session.bundle().path).filename().string() +
              ": the predicted and a measured step",
          summary.str());
      out << "wrote the report to " << o.report << "\n";
    }
    if (!o.profileOps.empty() && !finished) {
      std::ostringstream csv;
      csv << "op,forward_seconds,backward_seconds,micro_batch_rows\n"
          << std::setprecision(9);
      // Across ranks every rank sends its ops; rank 0 writes them all.
      const auto ops = session.opProfile();
      for (auto &[op, t] : ops)
        csv << op << "," << t.first << "," << t.second << ","
            << session.microBatchSize() << "\n";
      if (session.rank() == 0) {
        writeFileAtomically(o.profileOps, csv.str());
        printOpPredictions(out, session.bundle().schedule, ops);
        out << "wrote the per-op times to " << o.profileOps
            << " (for gpipe-opt --cost-table)\n";
      }
    }
    if (!o.trace.empty() && !finished) {
      session.writeTrace(o.trace);
      out << "wrote the trace to " << o.trace
          << " (open it in ui.perfetto.dev or chrome://tracing)\n";
    }
    // Across ranks, every rank gathers its parameters to rank 0, which
    // writes the files.
    bool writes = session.rank() == 0;
    std::map<std::string, HostTensor> params;
    if (!o.saveOnnx.empty() || !o.saveOnnxTraining.empty() ||
        !o.saveParams.empty())
      params = session.parameters();
    auto saveOnnx = [&](const std::string &path, const char *flag,
                        OnnxGraphMode mode, const char *what) {
      if (path.empty())
        return;
      const Bundle &b = session.bundle();
      if (b.sourceModel.empty())
        throw InputError(std::string(flag) +
                         ": the bundle keeps no ONNX model (recompile it "
                         "with this gpipe-opt)");
      if (!writes)
        return;
      size_t n = writeOnnxWithParameters(b.partPath(b.sourceModel), params,
                                         path, mode);
      out << "wrote the trained model (" << n << " parameters" << what
          << ") to " << path << "\n";
    };
    saveOnnx(o.saveOnnx, "--save-onnx", OnnxGraphMode::Inference, "");
    saveOnnx(o.saveOnnxTraining, "--save-onnx-training",
             OnnxGraphMode::AsExported, ", training graph");
    if (!o.saveParams.empty()) {
      if (writes) {
        std::filesystem::create_directories(o.saveParams);
        for (auto &[name, tensor] : params)
          writeNpy(o.saveParams + "/" + name + ".npy", tensor);
        out << "wrote the parameters to " << o.saveParams << "\n";
      }
    }
  }
  return result;
}

} // namespace gpipe::runtime
