// ProcessGroup where the runtime is built without MPI: one process runs
// every stage, and a launch by mpirun is refused.
#include "gpipe/runtime/ProcessGroup.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include "Reducer.h"
#include "Transport.h"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace gpipe::runtime {

std::string mpiVersion() { return "not built"; }

std::unique_ptr<ProcessGroup> ProcessGroup::fromLauncher() {
  if (launchedByMpirun())
    throw std::runtime_error("started by mpirun, but this gpipe-run was "
                             "built without MPI (install libopenmpi-dev and "
                             "rebuild)");
  return nullptr;
}

ProcessGroup::~ProcessGroup() = default;

std::unique_ptr<Transport>
ProcessGroup::createTransport(const std::vector<int64_t> &) {
  throw std::runtime_error("this gpipe-run was built without MPI");
}

std::unique_ptr<Reducer>
ProcessGroup::createReducer(const std::vector<int64_t> &, int) {
  throw std::runtime_error("this gpipe-run was built without MPI");
}

double ProcessGroup::sum(double value) { return value; }

void ProcessGroup::abort(const std::string &why, int code) {
  std::cerr << "gpipe-run: error: " << why << std::endl;
  std::_Exit(code);
}

double ProcessGroup::broadcast(double value, int64_t) { return value; }

std::vector<std::string> ProcessGroup::gather(const std::string &bytes,
                                              int64_t) {
  return {bytes};
}

void ProcessGroup::barrier() {}

double ProcessGroup::roundTripSeconds(int64_t, size_t, int) {
  throw std::runtime_error("this gpipe-run was built without MPI");
}

} // namespace gpipe::runtime
