// gpipe-run: runs a bundle compiled by gpipe-opt.
//
// --infer runs inference bundles; --train arrives with the trainer.
#include "gpipe/common/Version.h"
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/Idx.h"
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/Npy.h"
#include "gpipe/runtime/OnnxExport.h"
#include "gpipe/runtime/RuntimeInfo.h"
#include "gpipe/runtime/TensorProto.h"
#include "gpipe/runtime/TrainingSession.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <unistd.h>

namespace {

/// gpipe-run --infer: read the inputs, run, write DIR/<output>.npy.
int runInference(const std::string &bundlePath,
                 const std::vector<std::string> &inputSpecs,
                 const std::string &outputDir) {
  using namespace gpipe::runtime;
  std::map<std::string, HostTensor> inputs;
  for (const std::string &spec : inputSpecs) {
    auto eq = spec.find('=');
    bool isNpz =
        spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".npz") == 0;
    if (eq == std::string::npos && isNpz) {
      // Every array of the archive, by name.
      try {
        for (auto &[name, tensor] : readNpz(spec))
          inputs[name] = std::move(tensor);
      } catch (const std::runtime_error &e) {
        std::cerr << "gpipe-run: error: " << e.what() << "\n";
        return 1;
      }
      continue;
    }
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      std::cerr << "gpipe-run: error: --input expects NAME=FILE, got '" << spec
                << "'\n";
      return 1;
    }
    std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
    try {
      if (file.size() > 4 && file.compare(file.size() - 4, 4, ".npz") == 0) {
        auto arrays = readNpz(file);
        auto it = arrays.find(name);
        if (it == arrays.end())
          throw std::runtime_error(file + ": no array named '" + name + "'");
        inputs[name] = std::move(it->second);
      } else {
        inputs[name] = readTensorFile(file);
      }
    } catch (const std::runtime_error &e) {
      std::cerr << "gpipe-run: error: input '" << name << "': " << e.what()
                << "\n";
      return 1;
    }
  }
  try {
    InferenceSession session(bundlePath);
    std::map<std::string, HostTensor> outputs = session.run(inputs);
    std::filesystem::create_directories(outputDir);
    for (const auto &[name, tensor] : outputs) {
      std::string path = outputDir + "/" + name + ".npy";
      writeNpy(path, tensor);
      std::cout << "wrote " << path << " " << tensor.describe() << "\n";
    }
  } catch (const BundleError &e) {
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  } catch (const InputError &e) {
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception &e) {
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

struct TrainOptions {
  std::string data, evalData, lossLog, saveParams, checkpointDir, saveOnnx;
  std::string trace, profileOps;
  std::string lrSchedule = "constant";
  int64_t warmupSteps = 0, lrStepSize = 0;
  double lrGamma = 0.1;
  int64_t steps = 0, epochs = 0, checkpointEvery = 0;
  bool noShuffle = false, resume = false;
  unsigned seed = 0;
  double lr = -1;
  /// Optimizer hyper-parameters given on the command line, by name.
  std::map<std::string, double> hyper;
};

/// `rows` rows of `all`, row r taken from row rowOf(r).
template <typename RowOf>
gpipe::runtime::HostTensor gatherRows(const gpipe::runtime::HostTensor &all,
                                      int64_t rows, RowOf rowOf) {
  gpipe::runtime::HostTensor t;
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

/// A data set by path: an .npz (arrays by input name and 'labels') or a
/// directory of IDX files (Fashion-MNIST layout; `split` train or t10k),
/// whose images feed the model's first input.
std::map<std::string, gpipe::runtime::HostTensor>
loadData(const std::string &path, const std::string &split,
         gpipe::runtime::TrainingSession &session) {
  using namespace gpipe::runtime;
  if (!std::filesystem::is_directory(path))
    return readNpz(path);
  ImageDataset ds = readIdxDataset(path, split);
  std::map<std::string, HostTensor> data;
  for (const TensorSlot *slot : session.dataInputs())
    if (slot->name != "labels") {
      data[slot->name] = std::move(ds.images);
      break;
    }
  data["labels"] = std::move(ds.labels);
  return data;
}

/// Class labels must index the logits: checked before training starts.
void checkLabels(gpipe::runtime::TrainingSession &session,
                 const std::map<std::string, gpipe::runtime::HostTensor> &data,
                 const std::string &source) {
  using namespace gpipe::runtime;
  auto it = data.find("labels");
  int64_t classes = session.classCount();
  if (it == data.end() || it->second.dtype != DType::I64 || classes <= 0)
    return;
  const int64_t *l = reinterpret_cast<const int64_t *>(it->second.data.data());
  for (int64_t i = 0; i < it->second.numElements(); ++i)
    if (l[i] < 0 || l[i] >= classes)
      throw InputError(source + ": labels[" + std::to_string(i) +
                       "] = " + std::to_string(l[i]) + " is outside [0, " +
                       std::to_string(classes) + ")");
}

/// Accuracy of the model's class predictions on a labelled data set, run in
/// micro-batches (the last one padded).
double accuracy(gpipe::runtime::TrainingSession &session,
                const std::map<std::string, gpipe::runtime::HostTensor> &data) {
  using namespace gpipe::runtime;
  const HostTensor &labels = data.at("labels");
  int64_t n = labels.shape.at(0), b = session.microBatchSize(), correct = 0;
  const int64_t *label = reinterpret_cast<const int64_t *>(labels.data.data());
  for (int64_t first = 0; first < n; first += b) {
    std::map<std::string, HostTensor> batch;
    for (const TensorSlot *slot : session.dataInputs()) {
      batch[slot->name] = gatherRows(data.at(slot->name), b, [&](int64_t r) {
        return std::min(first + r, n - 1); // the last batch repeats a row
      });
    }
    HostTensor logits = session.evaluate(batch);
    if (logits.dtype != DType::F32 || logits.shape.size() != 2)
      throw InputError("accuracy needs [N, C] float32 logits");
    int64_t classes = logits.shape[1];
    const float *l = reinterpret_cast<const float *>(logits.data.data());
    for (int64_t r = 0; r < b && first + r < n; ++r) {
      const float *row = l + r * classes;
      correct += std::max_element(row, row + classes) - row == label[first + r];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

/// The learning rate of `step` (0-based): linear warm-up over the first
/// warmup steps, then constant, step decay (x gamma every N steps) or a
/// cosine down to 0 at the last step.
double learningRate(const TrainOptions &o, double base, int64_t step,
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

/// The pipeline's measured step, bubble and memory against the compiler's
/// prediction.
void printSummary(const gpipe::runtime::TrainingSession &session) {
  gpipe::runtime::TrainingSession::Stats s = session.stats();
  if (s.steps == 0)
    return;
  const gpipe::runtime::ScheduleSpec &schedule = session.bundle().schedule;
  double step = s.stepSeconds / static_cast<double>(s.steps);
  auto mib = [](int64_t bytes) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(1)
       << static_cast<double>(bytes) / (1 << 20) << " MiB";
    return os.str();
  };
  std::cout << std::fixed << std::setprecision(2)
            << "pipeline: " << s.stages.size() << " stage(s), " << schedule.kind
            << " schedule, " << schedule.microBatches << " micro-batches\n";
  for (size_t i = 0; i < s.stages.size(); ++i) {
    const auto &st = s.stages[i];
    std::cout << "  stage " << i << " on " << st.device << ": busy "
              << 100.0 * st.busySeconds / s.stepSeconds << "% of the steps, "
              << mib(st.allocatedBytes) << " allocated (predicted peak "
              << mib(st.predictedPeakBytes) << ")\n";
  }
  std::cout << "  step " << step * 1e3 << " ms measured (mean of " << s.steps
            << "), " << s.predictedStepSeconds * 1e3 << " ms predicted; bubble "
            << 100.0 * s.bubble() << "% measured, " << 100.0 * s.predictedBubble
            << "% predicted\n"
            << std::defaultfloat << std::setprecision(6);
}

/// gpipe-run --train: optimizer steps over the rows of a data set.
int runTraining(const std::string &bundlePath, const TrainOptions &o) {
  using namespace gpipe::runtime;
  try {
    TrainingSession session(bundlePath);
    session.setRandomSeed(o.seed);
    if (!o.trace.empty())
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
    if (o.data.empty())
      throw InputError("--train needs --data=FILE.npz or a directory of IDX "
                       "files");
    std::map<std::string, HostTensor> data = loadData(o.data, "train", session);
    std::map<std::string, HostTensor> evalData;
    if (!o.evalData.empty())
      evalData = loadData(o.evalData, "t10k", session);
    checkLabels(session, data, o.data);
    if (!evalData.empty())
      checkLabels(session, evalData, o.evalData);
    int64_t samples = -1;
    for (const TensorSlot *slot : session.dataInputs()) {
      auto it = data.find(slot->name);
      if (it == data.end())
        throw InputError(o.data + ": no array '" + slot->name +
                         "' (the model's inputs and 'labels')");
      const HostTensor &t = it->second;
      bool tailOk =
          t.dtype == slot->dtype && t.shape.size() == slot->shape.size();
      for (size_t i = 1; tailOk && i < t.shape.size(); ++i)
        tailOk = t.shape[i] == slot->shape[i];
      if (!tailOk || t.shape.empty() || t.shape[0] == 0 ||
          (samples >= 0 && t.shape[0] != samples))
        throw InputError(o.data + ": array '" + slot->name + "' is " +
                         t.describe() + ", expected " +
                         std::string(dtypeName(slot->dtype)) +
                         " rows shaped like the model's input, as many as "
                         "the other arrays");
      samples = t.shape[0];
    }
    int64_t batch = session.batchSize();
    int64_t perEpoch = std::max<int64_t>(1, samples / batch);
    int64_t steps =
        o.steps > 0 ? o.steps : std::max<int64_t>(1, o.epochs) * perEpoch;
    std::string checkpoint =
        o.checkpointDir.empty() ? "" : o.checkpointDir + "/checkpoint.bin";
    int64_t firstStep = 0;
    if (o.resume) {
      if (checkpoint.empty())
        throw InputError("--resume needs --checkpoint-dir");
      if (std::filesystem::exists(checkpoint)) {
        uint64_t seed = session.loadCheckpoint(checkpoint);
        if (seed != o.seed)
          throw InputError("--seed differs from the checkpoint's (" +
                           std::to_string(seed) + ")");
        firstStep = session.stepsTaken();
        std::cout << "resumed from " << checkpoint << " after step "
                  << firstStep << "\n";
      }
    }
    if (!checkpoint.empty())
      std::filesystem::create_directories(o.checkpointDir);
    std::ofstream lossLog;
    if (!o.lossLog.empty()) {
      // A resumed run continues the log of the steps it keeps.
      if (firstStep > 0 && std::filesystem::exists(o.lossLog)) {
        std::ifstream old(o.lossLog);
        std::string line, kept;
        for (int64_t n = 0; n <= firstStep && std::getline(old, line); ++n)
          kept += line + "\n";
        old.close();
        lossLog.open(o.lossLog, std::ios::trunc);
        lossLog << kept;
      } else {
        lossLog.open(o.lossLog);
        lossLog << "step,loss\n";
      }
      if (!lossLog)
        throw InputError("cannot write --loss-log file '" + o.lossLog + "'");
    }
    std::vector<int64_t> order(samples);
    std::iota(order.begin(), order.end(), 0);
    bool terminal = isatty(STDOUT_FILENO);
    auto start = std::chrono::steady_clock::now();
    auto shuffleFor = [&](int64_t epochIndex) {
      std::iota(order.begin(), order.end(), 0);
      std::mt19937 rng(o.seed + static_cast<unsigned>(epochIndex));
      std::shuffle(order.begin(), order.end(), rng);
    };
    if (!o.noShuffle)
      shuffleFor(firstStep * batch / samples);
    for (int64_t step = firstStep; step < steps; ++step) {
      int64_t first = step * batch;
      // A new pass over the data gets its own permutation (a function of
      // the seed and the pass, so resumed runs see the same order).
      if (!o.noShuffle && step > firstStep &&
          first / samples != (first - batch) / samples)
        shuffleFor(first / samples);
      session.setLearningRate(learningRate(o, baseLr, step, steps));
      std::map<std::string, HostTensor> mini;
      for (const TensorSlot *slot : session.dataInputs()) {
        mini[slot->name] =
            gatherRows(data.at(slot->name), batch,
                       [&](int64_t r) { return order[(first + r) % samples]; });
      }
      double loss = session.step(mini);
      // The first step creates caches and touches memory: not profiled.
      if (!o.profileOps.empty() && step == firstStep && steps - firstStep > 1)
        session.enableOpProfile();
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      int64_t epoch = step / perEpoch + 1;
      double rate = (step + 1) * batch / seconds;
      double eta = (steps - step - 1) * batch / rate;
      // A progress line redrawn in place on a terminal; otherwise about ten
      // lines per epoch.
      bool last = step + 1 == steps;
      if (terminal || last ||
          (step + 1) % std::max<int64_t>(1, perEpoch / 10) == 0) {
        std::cout << (terminal ? "\r" : "") << "epoch " << epoch << "  step "
                  << step + 1 << "/" << steps << "  loss " << loss << "  "
                  << static_cast<int64_t>(rate) << " samples/s  ETA "
                  << static_cast<int64_t>(eta) << " s"
                  << (terminal && !last ? "   " : "\n") << std::flush;
      }
      if (lossLog)
        lossLog << step + 1 << "," << loss << std::endl;
      if (!checkpoint.empty() &&
          ((o.checkpointEvery > 0 && (step + 1) % o.checkpointEvery == 0) ||
           step + 1 == steps))
        session.saveCheckpoint(checkpoint, o.seed);
      bool epochEnd = (step + 1) % perEpoch == 0 || step + 1 == steps;
      if (epochEnd && !evalData.empty())
        std::cout << (terminal ? "\n" : "") << "epoch "
                  << (step + 1 + perEpoch - 1) / perEpoch << ": test accuracy "
                  << 100.0 * accuracy(session, evalData) << "% on "
                  << evalData.at("labels").shape.at(0) << " samples\n"
                  << std::flush;
    }
    printSummary(session);
    if (!o.profileOps.empty()) {
      std::ostringstream csv;
      csv << "op,forward_seconds,backward_seconds\n" << std::setprecision(9);
      for (auto &[op, t] : session.opProfile())
        csv << op << "," << t.first << "," << t.second << "\n";
      writeFileAtomically(o.profileOps, csv.str());
      std::cout << "wrote the per-op times to " << o.profileOps
                << " (for gpipe-opt --cost-table)\n";
    }
    if (!o.trace.empty()) {
      session.writeTrace(o.trace);
      std::cout << "wrote the trace to " << o.trace
                << " (open it in ui.perfetto.dev or chrome://tracing)\n";
    }
    if (!o.saveOnnx.empty()) {
      const Bundle &b = session.bundle();
      if (b.sourceModel.empty())
        throw InputError("--save-onnx: the bundle keeps no ONNX model "
                         "(recompile it with this gpipe-opt)");
      size_t n = writeOnnxWithParameters(b.partPath(b.sourceModel),
                                         session.parameters(), o.saveOnnx);
      std::cout << "wrote the trained model (" << n << " parameters) to "
                << o.saveOnnx << "\n";
    }
    if (!o.saveParams.empty()) {
      std::filesystem::create_directories(o.saveParams);
      for (auto &[name, tensor] : session.parameters())
        writeNpy(o.saveParams + "/" + name + ".npy", tensor);
      std::cout << "wrote the parameters to " << o.saveParams << "\n";
    }
  } catch (const std::exception &e) {
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"gpipe-run: run a pipelined training bundle compiled by "
               "gpipe-opt\n\n"
               "  gpipe-run model.gpipe --train --data=FILE [--epochs=E]\n"
               "  gpipe-run model.gpipe --infer --input NAME=FILE "
               "--output DIR\n",
               "gpipe-run"};
  app.set_version_flag("--version", std::string("gpipe-run ") +
                                        gpipe::kVersion + "\n" +
                                        gpipe::runtime::runtimeInfo());
  std::string bundle;
  app.add_option("bundle", bundle, "The bundle written by gpipe-opt -o")
      ->type_name("BUNDLE");
  bool train = false, infer = false, listDevices = false;
  auto *trainFlag = app.add_flag("--train", train, "Train the model");
  auto *inferFlag = app.add_flag("--infer", infer, "Run inference");
  trainFlag->excludes(inferFlag);
  app.add_flag("--list-devices", listDevices,
               "Print the devices this runtime can use and exit");
  std::vector<std::string> inputSpecs;
  app.add_option(
         "--input", inputSpecs,
         "NAME=FILE: a graph input, a NumPy .npy or ONNX TensorProto .pb "
         "file (--infer; "
         "repeat for each input; any number of rows: larger inputs "
         "run in micro-batches of the compiled batch)")
      ->type_name("NAME=FILE");
  std::string outputDir = ".";
  app.add_option("--output", outputDir,
                 "Directory for the outputs, written as <name>.npy "
                 "(--infer; default: the current directory)")
      ->type_name("DIR");
  TrainOptions trainOptions;
  app.add_option("--data", trainOptions.data,
                 "Training data (--train): a .npz with one array per model "
                 "input and 'labels', or a directory of IDX files as "
                 "Debian's dataset-fashion-mnist installs them")
      ->type_name("FILE.npz|DIR");
  app.add_option("--eval-data", trainOptions.evalData,
                 "Evaluation data (--train): .npz or IDX directory (its t10k "
                 "split); accuracy is printed after each epoch")
      ->type_name("FILE.npz|DIR");
  app.add_option("--steps", trainOptions.steps,
                 "Optimizer steps to run (--train)");
  app.add_option("--epochs", trainOptions.epochs,
                 "Passes over the data (--train; default 1 when --steps is "
                 "not given)");
  app.add_flag("--no-shuffle", trainOptions.noShuffle,
               "Step i uses samples [i*B, (i+1)*B) in order, wrapping");
  app.add_option("--seed", trainOptions.seed,
                 "Seed of the data shuffling and of dropout (default 0)");
  app.add_option("--lr", trainOptions.lr,
                 "Learning rate, overriding the compiled one");
  for (auto [flag, name, what] :
       {std::tuple{"--momentum", "momentum", "SGD momentum"},
        std::tuple{"--weight-decay", "weight_decay", "weight decay"},
        std::tuple{"--beta1", "beta1", "Adam beta1"},
        std::tuple{"--beta2", "beta2", "Adam beta2"},
        std::tuple{"--eps", "eps", "Adam epsilon"}})
    app.add_option_function<double>(
        flag,
        [&trainOptions, name = std::string(name)](double v) {
          trainOptions.hyper[name] = v;
        },
        std::string(what) + ", overriding the compiled one");
  app.add_option("--lr-schedule", trainOptions.lrSchedule,
                 "constant (default), step (x --lr-gamma every "
                 "--lr-step-size steps) or cosine (to 0 at the last step)");
  app.add_option("--warmup-steps", trainOptions.warmupSteps,
                 "Linear learning-rate warm-up over the first N steps");
  app.add_option("--lr-step-size", trainOptions.lrStepSize,
                 "Steps between decays of --lr-schedule=step");
  app.add_option("--lr-gamma", trainOptions.lrGamma,
                 "Decay factor of --lr-schedule=step (default 0.1)");
  app.add_option("--loss-log", trainOptions.lossLog,
                 "CSV with header step,loss: one row per optimizer step")
      ->type_name("FILE.csv");
  app.add_option("--checkpoint-dir", trainOptions.checkpointDir,
                 "Directory of checkpoint.bin: parameters, optimizer state "
                 "and step, written atomically")
      ->type_name("DIR");
  app.add_option("--checkpoint-every", trainOptions.checkpointEvery,
                 "Write a checkpoint every N steps (and at the end)");
  app.add_flag("--resume", trainOptions.resume,
               "Continue from the checkpoint in --checkpoint-dir, if any");
  app.add_option("--save-onnx", trainOptions.saveOnnx,
                 "Write the trained model: the source ONNX model with the "
                 "trained parameters")
      ->type_name("FILE.onnx");
  app.add_option("--profile-ops", trainOptions.profileOps,
                 "Time every kernel and write each model op's mean forward "
                 "and backward seconds per micro-batch (after the first "
                 "step), the cost table of gpipe-opt --cost-table")
      ->type_name("FILE.csv");
  app.add_option("--trace", trainOptions.trace,
                 "Write a Chrome/Perfetto trace of every instruction and "
                 "kernel on every device")
      ->type_name("FILE.json");
  app.add_option("--save-params", trainOptions.saveParams,
                 "Directory for the trained parameters, <name>.npy each")
      ->type_name("DIR");
  std::string devices;
  app.add_option("--devices", devices,
                 "Check a device list (cpu:N, cpu:A-B, cuda:N, "
                 "comma-separated) against this runtime");
  CLI11_PARSE(app, argc, argv);

  if (listDevices) {
    std::cout << gpipe::runtime::runtimeInfo();
    return 0;
  }
  if (!devices.empty()) {
    try {
      for (const auto &d : gpipe::runtime::parseDevices(devices))
        std::cout << d.str() << "\n";
    } catch (const gpipe::runtime::DeviceListError &e) {
      std::cerr << "gpipe-run: error: --devices: " << e.what() << "\n";
      return 1;
    }
    if (!train && !infer)
      return 0;
  }
  if (!train && !infer) {
    std::cerr << app.help()
              << "\ngpipe-run: error: nothing to do: pass "
                 "--train or --infer with a bundle\n";
    return 1;
  }
  if (bundle.empty()) {
    std::cerr << "gpipe-run: error: --train and --infer need a bundle\n";
    return 1;
  }
  if (infer)
    return runInference(bundle, inputSpecs, outputDir);
  return runTraining(bundle, trainOptions);
}
