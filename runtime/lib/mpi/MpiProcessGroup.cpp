// ProcessGroup on MPI.
#include "gpipe/runtime/ProcessGroup.h"
#include "gpipe/runtime/RuntimeInfo.h"

#include "MpiReducer.h"
#include "MpiTransport.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace gpipe::runtime {

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

std::string mpiVersion() {
  // Callable before MPI_Init: says which library the runtime was linked to.
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS)
    return "unknown version";
  std::string version(text, length);
  return version.substr(0, version.find_first_of("\n,"));
}

ProcessGroup::~ProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

namespace {
/// Seconds a wait for another rank lasts before it gives up.
double waitLimit() {
  double timeout = 60;
  if (const char *env = std::getenv("GPIPE_MPI_TIMEOUT"))
    timeout = std::max(1.0, std::atof(env));
  return timeout;
}
} // namespace

std::unique_ptr<Transport>
ProcessGroup::createTransport(const std::vector<int64_t> &stageRanks) {
  return std::make_unique<MpiTransport>(MPI_COMM_WORLD, rank_, stageRanks,
                                        waitLimit());
}

std::unique_ptr<Reducer>
ProcessGroup::createReducer(const std::vector<int64_t> &ranks, int tag) {
  return std::make_unique<MpiReducer>(ranks, tag, rank_, waitLimit());
}

double ProcessGroup::sum(double value) {
  // MPI_Allreduce's order is the library's: gather to rank 0, add in rank
  // order, broadcast, so that every rank has the same bits.
  std::vector<double> all(static_cast<size_t>(size_));
  MPI_Gather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0,
             MPI_COMM_WORLD);
  double total = 0;
  for (double v : all)
    total += v;
  return broadcast(total, 0);
}

void ProcessGroup::abort(const std::string &why, int code) {
  // One write: mpirun forwards a rank's stderr as it reads it, and its
  // own MPI_Abort banner must not land inside this line.
  std::string line = "gpipe-run: error: rank " + std::to_string(rank_) + " (" +
                     host_ + "): " + why + "\n";
  for (size_t done = 0; done < line.size();) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0)
      break;
    done += static_cast<size_t>(n);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

double ProcessGroup::broadcast(double value, int64_t root) {
  MPI_Bcast(&value, 1, MPI_DOUBLE, static_cast<int>(root), MPI_COMM_WORLD);
  return value;
}

std::vector<std::string> ProcessGroup::gather(const std::string &bytes,
                                              int64_t root) {
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    throw std::runtime_error("rank " + std::to_string(rank_) +
                             " has more "
                             "than 2 GiB to gather");
  int size = static_cast<int>(bytes.size());
  std::vector<int> sizes(static_cast<size_t>(size_));
  MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT,
             static_cast<int>(root), MPI_COMM_WORLD);
  std::vector<int> offsets(sizes.size());
  std::string all;
  if (rank_ == root) {
    int64_t total = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += sizes[r];
    }
    if (total > INT_MAX)
      throw std::runtime_error("more than 2 GiB to gather on rank " +
                               std::to_string(root));
    all.resize(static_cast<size_t>(total));
  }
  MPI_Gatherv(bytes.data(), size, MPI_BYTE, all.data(), sizes.data(),
              offsets.data(), MPI_BYTE, static_cast<int>(root), MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank_ == root)
    for (size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[r]),
                               static_cast<size_t>(sizes[r])));
  return out;
}

void ProcessGroup::barrier() { MPI_Barrier(MPI_COMM_WORLD); }

double ProcessGroup::roundTripSeconds(int64_t peer, size_t bytes, int repeats) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw std::runtime_error("a round trip of more than 2 GiB");
  std::vector<char> buffer(std::max<size_t>(bytes, 1));
  int count = static_cast<int>(bytes), other = static_cast<int>(peer);
  bool first = rank_ < peer;
  std::vector<double> times;
  for (int i = 0; i < repeats + 1; ++i) { // the first one warms up
    double start = MPI_Wtime();
    for (int leg = 0; leg < 2; ++leg) {
      if ((leg == 0) == first)
        MPI_Send(buffer.data(), count, MPI_BYTE, other, 7, MPI_COMM_WORLD);
      else
        MPI_Recv(buffer.data(), count, MPI_BYTE, other, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    }
    if (i > 0)
      times.push_back(MPI_Wtime() - start);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

} // namespace gpipe::runtime
