// ProcessGroup on MPI.
#include "gpipe/runtime/ProcessGroup.h"

#include "MpiTransport.h"

#include <mpi.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace gpipe::runtime {

bool ProcessGroup::launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

ProcessGroup::ProcessGroup(int64_t rank, int64_t size, std::string host)
    : rank_(rank), size_(size), host_(std::move(host)) {}

std::unique_ptr<ProcessGroup> ProcessGroup::fromLauncher() {
  if (!launchedByMpirun())
    return nullptr;
  // Every stage thread posts and tests its own messages.
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) !=
      MPI_SUCCESS)
    throw std::runtime_error("MPI_Init_thread failed");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw std::runtime_error("this MPI library does not support "
                             "MPI_THREAD_MULTIPLE, which gpipe's stage "
                             "threads need");
  }
  int rank = 0, size = 1, length = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME];
  MPI_Get_processor_name(name, &length);
  return std::unique_ptr<ProcessGroup>(
      new ProcessGroup(rank, size, std::string(name, length)));
}

ProcessGroup::~ProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

std::unique_ptr<Transport>
ProcessGroup::createTransport(const std::vector<int64_t> &stageRanks) {
  double timeout = 60;
  if (const char *env = std::getenv("GPIPE_MPI_TIMEOUT"))
    timeout = std::max(1.0, std::atof(env));
  return std::make_unique<MpiTransport>(MPI_COMM_WORLD, rank_, stageRanks,
                                        timeout);
}

void ProcessGroup::abort(const std::string &why, int code) {
  std::cerr << "gpipe-run: error: rank " << rank_ << " (" << host_
            << "): " << why << std::endl;
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

double ProcessGroup::broadcast(double value, int64_t root) {
  MPI_Bcast(&value, 1, MPI_DOUBLE, static_cast<int>(root), MPI_COMM_WORLD);
  return value;
}

void ProcessGroup::barrier() { MPI_Barrier(MPI_COMM_WORLD); }

} // namespace gpipe::runtime
