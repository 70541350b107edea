// gpipe-run: runs a bundle compiled by gpipe-opt.
//
// Thin: parses the flags, then runs inference (InferenceSession) or the
// training loop of the Trainer library (gpipe/runtime/Trainer.h).
#include "gpipe/common/Version.h"
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/FileIO.h"
#include "gpipe/runtime/Generate.h"
#include "gpipe/runtime/Idx.h"
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/Npy.h"
#include "gpipe/runtime/OnnxExport.h"
#include "gpipe/runtime/ProcessGroup.h"
#include "gpipe/runtime/RuntimeInfo.h"
#include "gpipe/runtime/TensorProto.h"
#include "gpipe/runtime/Trainer.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <sys/ioctl.h>
#include <unistd.h>

namespace {

/// The width of the terminal on stdout: its window size, else $COLUMNS,
/// else 80.
int terminalColumns() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
    return size.ws_col;
  if (const char *columns = std::getenv("COLUMNS"))
    if (int n = std::atoi(columns); n > 0)
      return n;
  return 80;
}

/// gpipe-run --infer: read the inputs, run, write DIR/<output>.npy.
int runInference(const std::string &bundlePath,
                 const std::vector<std::string> &inputSpecs,
                 const std::string &outputDir, const std::string &profileOps) {
  using namespace gpipe::runtime;
  std::map<std::string, HostTensor> inputs;
  std::optional<HostTensor> unnamed; // --input FILE
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
    if (eq == std::string::npos && !spec.empty()) {
      // FILE alone: the input of a model of one input (checked below).
      if (unnamed) {
        std::cerr << "gpipe-run: error: --input " << spec
                  << ": only one --input may leave out NAME= (NAME=FILE)\n";
        return 1;
      }
      try {
        unnamed = readTensorFile(spec);
      } catch (const std::runtime_error &e) {
        std::cerr << "gpipe-run: error: --input " << spec << ": " << e.what()
                  << "\n";
        return 1;
      }
      continue;
    }
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      std::cerr << "gpipe-run: error: --input expects NAME=FILE or FILE, got '"
                << spec << "'\n";
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
  // Under mpirun, one rank of a bundle whose stages are on several: each
  // rank runs its own stages, the last stage's rank writes the outputs,
  // and an error on any rank ends every rank.
  std::unique_ptr<ProcessGroup> group;
  try {
    group = ProcessGroup::fromLauncher();
  } catch (const std::exception &e) {
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  }
  auto fail = [&](const std::exception &e) {
    if (group && group->size() > 1)
      group->abort(e.what()); // every rank ends, now
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  };
  try {
    InferenceSession session(bundlePath, group.get());
    if (unnamed) {
      const std::vector<TensorSlot> &slots = session.bundle().inputs;
      if (slots.size() != 1) {
        std::string names;
        for (const TensorSlot &s : slots)
          names += (names.empty() ? "" : ", ") + s.name;
        throw InputError("--input FILE without NAME= needs a model of one "
                         "input; this one takes " +
                         std::to_string(slots.size()) + " (" + names +
                         "): give each as --input NAME=FILE");
      }
      inputs[slots.front().name] = std::move(*unnamed);
    }
    if (!profileOps.empty() && group && group->size() > 1)
      throw InputError("--profile-ops with --infer times the stages of one "
                       "process: compile the bundle without rank prefixes");
    std::map<std::string, HostTensor> outputs = session.run(inputs);
    if (!profileOps.empty()) {
      // Timed after the run above warmed the caches and the code.
      session.setProfile(true);
      outputs = session.run(inputs);
      std::ostringstream csv;
      csv << "op,forward_seconds,backward_seconds,micro_batch_rows\n"
          << std::setprecision(9);
      for (const auto &[op, seconds] : session.opProfile())
        csv << op << "," << seconds << ",0," << session.compiledBatch() << "\n";
      writeFileAtomically(profileOps, csv.str());
      std::cout << "wrote the per-op times of "
                << session.profiledMicroBatches() << " micro-batches to "
                << profileOps << " (for gpipe-opt --mode=infer --cost-table)\n";
    }
    if (!session.ownsOutputs())
      return 0;
    std::filesystem::create_directories(outputDir);
    for (const auto &[name, tensor] : outputs) {
      std::string path = outputDir + "/" + name + ".npy";
      writeNpy(path, tensor);
      std::cout << "wrote " << path << " " << tensor.describe() << "\n";
    }
  } catch (const std::exception &e) {
    return fail(e);
  }
  return 0;
}

/// gpipe-run --infer --generate=N: continue a prompt byte by byte.
int runGeneration(const std::string &bundlePath,
                  const gpipe::runtime::GenerateOptions &options) {
  using namespace gpipe::runtime;
  try {
    InferenceSession session(bundlePath);
    std::cout << options.prompt << std::flush;
    generateBytes(session, options,
                  [](char c) { std::cout << c << std::flush; });
    std::cout << "\n";
  } catch (const std::exception &e) {
    std::cerr << "\ngpipe-run: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

/// gpipe-run --train: optimizer steps over the rows of a data set.
/// Trains in this process, or as one rank of an mpirun job: each rank
/// runs its own stages, rank 0 prints and writes the run's outputs, and an
/// error on any rank ends every rank (docs/distributed.md).
int runTraining(const std::string &bundlePath,
                gpipe::runtime::TrainerOptions options, bool inOneProcess) {
  using gpipe::runtime::ProcessGroup;
  std::unique_ptr<ProcessGroup> group;
  try {
    group = ProcessGroup::fromLauncher();
  } catch (const std::exception &e) {
    std::cerr << "gpipe-run: error: " << e.what() << "\n";
    return 1;
  }
  try {
    if (group && inOneProcess)
      throw gpipe::runtime::InputError(
          "--in-one-process runs every stage in one process, not under "
          "mpirun");
    auto session = group ? std::make_unique<gpipe::runtime::TrainingSession>(
                               bundlePath, *group)
                         : std::make_unique<gpipe::runtime::TrainingSession>(
                               bundlePath, inOneProcess);
    std::ostream silent(nullptr);
    bool speaks = !group || group->rank() == 0;
    if (!speaks) {
      options.lossLog.clear();
      options.metrics.clear();
    }
    // mpirun forwards output through a pseudo-terminal whatever its own
    // output is: plain lines there.
    options.terminal = speaks && !group && isatty(STDOUT_FILENO);
    options.columns = terminalColumns();
    gpipe::runtime::runTrainer(*session, options, speaks ? std::cout : silent);
  } catch (const std::exception &e) {
    if (group && group->size() > 1)
      group->abort(e.what()); // every rank ends, now
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
               "--output DIR\n"
               "  gpipe-run lm.gpipe --infer --generate=N --prompt=TEXT\n",
               "gpipe-run"};
  // Describes the CUDA backend without loading it (--list-devices does).
  app.set_version_flag("--version", [] {
    return std::string("gpipe-run ") + gpipe::kVersion + "\n" +
           gpipe::runtime::runtimeInfo(/*probeGpus=*/false);
  });
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
         "run in micro-batches of the compiled batch); FILE alone for a "
         "model of one input; FILE.npz alone: its arrays by name")
      ->type_name("[NAME=]FILE");
  std::string outputDir = ".";
  app.add_option("--output", outputDir,
                 "Directory for the outputs, written as <name>.npy "
                 "(--infer; default: the current directory); with "
                 "--calibrate, the profile's file")
      ->type_name("DIR");
  std::string calibrate;
  app.add_option("--calibrate", calibrate,
                 "Measure a GPU of this host (cuda:N: float32 sgemm, memory "
                 "and host-link bandwidth, memory size) and write its "
                 "profile to --output=FILE.json, for gpipe-opt "
                 "--device-profile")
      ->type_name("cuda:N");
  gpipe::runtime::TrainerOptions trainOptions;
  app.add_option("--data", trainOptions.data,
                 "Training data (--train): a .npz with one array per model "
                 "input and 'labels', a directory of IDX files as "
                 "Debian's dataset-fashion-mnist installs them, or a "
                 "plain-text file for a byte-level language model (int64 "
                 "token ids [batch, T] in, [batch, T, V] logits out): "
                 "sequences of T bytes, each labelled with the bytes one "
                 "further on")
      ->type_name("FILE.npz|DIR|FILE.txt");
  app.add_option("--eval-data", trainOptions.evalData,
                 "Evaluation data (--train): .npz or IDX directory (its t10k "
                 "split); accuracy is printed after each epoch")
      ->type_name("FILE.npz|DIR");
  CLI::Option *stepsFlag = app.add_option("--steps", trainOptions.steps,
                                          "Optimizer steps to run (--train)");
  app.add_option("--epochs", trainOptions.epochs,
                 "Passes over the data (--train; default 1 when --steps is "
                 "not given)")
      ->excludes(stepsFlag);
  bool inOneProcess = false;
  app.add_flag("--in-one-process", inOneProcess,
               "Run every stage of a bundle compiled for several MPI ranks "
               "in this process, as threads (without mpirun; e.g. to compare "
               "with an mpirun run)");
  app.add_flag("--no-shuffle", trainOptions.noShuffle,
               "Step i uses samples [i*B, (i+1)*B) in order, wrapping");
  app.add_option_function<std::string>(
         "--stream-data",
         [&trainOptions](const std::string &mode) {
           try {
             trainOptions.streamDataAbove =
                 gpipe::runtime::streamDataThreshold(mode);
           } catch (const gpipe::runtime::InputError &e) {
             throw CLI::ValidationError(e.what());
           }
         },
         "Arrays of the --data .npz stored uncompressed (numpy.savez) stay "
         "in the file and each batch's rows are read from it: auto "
         "(default: arrays over 64 MiB), always or never (load them whole)")
      ->type_name("auto|always|never");
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
  app.add_option("--metrics", trainOptions.metrics,
                 "JSON lines: one per step (step, epoch, loss, lr, "
                 "samples_per_s or tokens_per_s, time_s) and one per "
                 "evaluation (eval_accuracy, eval_samples); a resumed run "
                 "keeps the lines of the steps it keeps")
      ->type_name("FILE.jsonl");
  app.add_option("--checkpoint-dir", trainOptions.checkpointDir,
                 "Directory of checkpoint.bin: parameters, optimizer state "
                 "and step, written atomically")
      ->type_name("DIR");
  app.add_option("--checkpoint-every", trainOptions.checkpointEvery,
                 "Write a checkpoint every N steps (and at the end)")
      ->needs("--checkpoint-dir");
  app.add_flag("--resume", trainOptions.resume,
               "Continue from the checkpoint in --checkpoint-dir, if any")
      ->needs("--checkpoint-dir");
  app.add_option("--save-onnx", trainOptions.saveOnnx,
                 "Write the trained model for inference: the source ONNX "
                 "model with the trained parameters, BatchNormalization "
                 "using its running statistics and Dropout off")
      ->type_name("FILE.onnx");
  app.add_option("--save-onnx-training", trainOptions.saveOnnxTraining,
                 "Write the trained model as the training graph it was "
                 "exported as (BatchNormalization and Dropout in training "
                 "mode), e.g. to train it further elsewhere")
      ->type_name("FILE.onnx");
  app.add_option("--profile-ops", trainOptions.profileOps,
                 "Time every kernel and write each model op's mean forward "
                 "and backward seconds per micro-batch (after the first "
                 "step; with --infer, of a second run of the inputs), the "
                 "cost table of gpipe-opt --cost-table")
      ->type_name("FILE.csv");
  app.add_option("--trace", trainOptions.trace,
                 "Write a Chrome/Perfetto trace of every instruction and "
                 "kernel on every device")
      ->type_name("FILE.json");
  app.add_option("--report", trainOptions.report,
                 "Write an HTML page with the compiler's predicted step "
                 "beside a measured one (the step of median length), as "
                 "timelines of every stage (records every step, like "
                 "--trace)")
      ->type_name("FILE.html");
  app.add_option("--save-params", trainOptions.saveParams,
                 "Directory for the trained parameters, <name>.npy each")
      ->type_name("DIR");
  gpipe::runtime::GenerateOptions generate;
  auto *generateFlag = app.add_option(
      "--generate", generate.count,
      "With --infer on a byte-level language model (int64 token ids "
      "[batch, T] in, [batch, T, V] logits out): print --prompt and N more "
      "bytes, each drawn from the model given the T bytes before it");
  generateFlag->type_name("N");
  app.add_option("--prompt", generate.prompt,
                 "The text --generate continues (default: a newline)")
      ->needs(generateFlag);
  app.add_option("--temperature", generate.temperature,
                 "--generate: 0 takes the most likely byte (default); above "
                 "0 samples from softmax(logits / temperature)")
      ->needs(generateFlag);
  app.add_option("--generate-seed", generate.seed,
                 "--generate: seed of the sampling (default 0)")
      ->needs(generateFlag);
  std::string devices;
  app.add_option("--devices", devices,
                 "Check a device list (cpu:N, cpu:A-B, cuda:N, "
                 "comma-separated) against this host: prints each device "
                 "with ok or why it is missing; fails if one is missing");
  CLI11_PARSE(app, argc, argv);

  if (listDevices) {
    std::cout << gpipe::runtime::runtimeInfo(/*probeGpus=*/true);
    return 0;
  }
  if (!calibrate.empty()) {
    std::vector<gpipe::runtime::Device> parsed;
    try {
      parsed = gpipe::runtime::parseDevices(calibrate);
    } catch (const gpipe::runtime::DeviceListError &e) {
      std::cerr << "gpipe-run: error: --calibrate: " << e.what() << "\n";
      return 1;
    }
    if (parsed.size() != 1 ||
        parsed.front().kind != gpipe::runtime::DeviceKind::Cuda) {
      std::cerr << "gpipe-run: error: --calibrate measures one GPU (cuda:N), "
                   "not '"
                << calibrate
                << "' (CPU cores: gpipe-opt --calibrate -o profile.json)\n";
      return 1;
    }
    if (outputDir == "." || train || infer || !bundle.empty()) {
      std::cerr << "gpipe-run: error: --calibrate takes no bundle and "
                   "writes the profile to --output=FILE.json\n";
      return 1;
    }
    try {
      std::string profile =
          gpipe::runtime::calibrateGpu(parsed.front().ids.front(), std::cerr);
      gpipe::runtime::writeFileAtomically(outputDir, profile);
    } catch (const std::exception &e) {
      std::cerr << "gpipe-run: error: --calibrate=" << calibrate << ": "
                << e.what() << "\n";
      return 1;
    }
    std::cerr << "gpipe-run: wrote " << outputDir
              << " (gpipe-opt --device-profile=" << outputDir << ")\n";
    return 0;
  }
  if (!devices.empty()) {
    // Each device with whether this host has it; a missing one fails.
    std::vector<std::string> missing;
    try {
      for (const auto &d : gpipe::runtime::parseDevices(devices)) {
        std::string why = gpipe::runtime::deviceMissing(d);
        std::cout << d.str() << "\t" << (why.empty() ? "ok" : "missing: " + why)
                  << "\n";
        if (!why.empty())
          missing.push_back(d.str());
      }
    } catch (const gpipe::runtime::DeviceListError &e) {
      std::cerr << "gpipe-run: error: --devices: " << e.what() << "\n";
      return 1;
    }
    if (!missing.empty()) {
      std::cerr << "gpipe-run: error: --devices: this host lacks ";
      for (size_t i = 0; i < missing.size(); ++i)
        std::cerr << (i ? ", " : "") << missing[i];
      std::cerr << " (gpipe-run --list-devices shows what it has)\n";
      return 1;
    }
    if (!train && !infer)
      return 0;
  }
  if (generateFlag->count() && !infer) {
    std::cerr << "gpipe-run: error: --generate needs --infer (and an "
                 "inference bundle: gpipe-opt model.onnx --batch-size=1 -o "
                 "gen.gpipe)\n";
    return 1;
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
  if (infer && generateFlag->count()) {
    if (generate.count <= 0) {
      std::cerr << "gpipe-run: error: --generate needs a positive count\n";
      return 1;
    }
    if (!inputSpecs.empty()) {
      std::cerr << "gpipe-run: error: --generate takes its input from "
                   "--prompt, not --input\n";
      return 1;
    }
    return runGeneration(bundle, generate);
  }
  if (infer)
    return runInference(bundle, inputSpecs, outputDir, trainOptions.profileOps);
  return runTraining(bundle, trainOptions, inOneProcess);
}
