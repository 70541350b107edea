// What every ProcessGroup has, with MPI or without
// (mpi/MpiProcessGroup.cpp, NoMpiProcessGroup.cpp).
#include "gpipe/runtime/ProcessGroup.h"

#include <cstdlib>

namespace gpipe::runtime {

bool ProcessGroup::launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

ProcessGroup::ProcessGroup(int64_t rank, int64_t size, std::string host)
    : rank_(rank), size_(size), host_(std::move(host)) {}

} // namespace gpipe::runtime
