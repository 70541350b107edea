// gpipe-run: runs a bundle compiled by gpipe-opt.
//
// This version parses and checks its command line and reports what the
// runtime can run on; executing bundles (--infer, --train) comes with the
// bundle format and says so until then.
#include "gpipe/runtime/DeviceList.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include <CLI/CLI.hpp>

#include <iostream>

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
  std::cerr << "gpipe-run: error: running bundles ("
            << (train ? "--train" : "--infer")
            << ") is not implemented yet; gpipe-opt does not write bundles "
               "yet either\n";
  return 2;
}
