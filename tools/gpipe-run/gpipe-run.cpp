// gpipe-run: runs a bundle compiled by gpipe-opt.
//
// --infer runs inference bundles; --train arrives with the trainer.
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/InferenceSession.h"
#include "gpipe/runtime/Npy.h"
#include "gpipe/runtime/RuntimeInfo.h"
#include "gpipe/runtime/TensorProto.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

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

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"gpipe-run: run a pipelined training bundle compiled by "
               "gpipe-opt\n\n"
               "  gpipe-run model.gpipe --train --data=FILE [--epochs=E]\n"
               "  gpipe-run model.gpipe --infer --input NAME=FILE "
               "--output DIR\n",
               "gpipe-run"};
  app.set_version_flag("--version", std::string("gpipe-run 0.1.0\n") +
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
      for (const auto &d : gpipe::runtime::parseDeviceList(devices))
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
  std::cerr << "gpipe-run: error: --train is not implemented yet; this "
               "version runs inference bundles (--infer)\n";
  return 2;
}
