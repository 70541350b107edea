// What every ProcessGroup has, with MPI or without
// (mpi/MpiProcessGroup.cpp, NoMpiProcessGroup.cpp).
#include "gpipe/runtime/ProcessGroup.h"

#include "Clock.h"
#include "Reducer.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <vector>

namespace gpipe::runtime {

bool ProcessGroup::launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

ProcessGroup::ProcessGroup(int64_t rank, int64_t size, std::string host)
    : rank_(rank), size_(size), host_(std::move(host)) {}

double ProcessGroup::allReduceSeconds(size_t bytes, int repeats) {
  std::vector<int64_t> everyone(static_cast<size_t>(size_));
  std::iota(everyone.begin(), everyone.end(), 0);
  std::unique_ptr<Reducer> reducer = createReducer(everyone, 0);
  std::vector<float> data(std::max<size_t>(bytes / sizeof(float), 1), 1.0f);
  std::vector<double> times;
  for (int i = 0; i < repeats + 1; ++i) { // the first one warms up
    barrier();
    double start = steadySeconds();
    reducer->start(data.data(), data.size());
    reducer->waitAll();
    if (i > 0)
      times.push_back(steadySeconds() - start);
    std::fill(data.begin(), data.end(), 1.0f); // no overflow to infinity
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

} // namespace gpipe::runtime
