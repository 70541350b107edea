#include "MpiReducer.h"

#include "MpiError.h"

#include "Clock.h"
#include "SpinWait.h"
#include "Transport.h"

#include <climits>
#include <thread>

namespace gpipe::runtime {

namespace {

std::string rankList(const std::vector<int64_t> &ranks) {
  std::string out;
  for (int64_t r : ranks)
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
} // namespace

MpiReducer::MpiReducer(const std::vector<int64_t> &ranks_, int tag,
                       int64_t worldRank, double timeoutSeconds)
    : ranks(ranks_), worldRank(worldRank), timeoutSeconds(timeoutSeconds) {
  MPI_Group world, members;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> list(ranks.begin(), ranks.end());
  MPI_Group_incl(world, static_cast<int>(list.size()), list.data(), &members);
  // Collective over the members only: the other ranks go on.
  int code = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &comm);
  MPI_Group_free(&members);
  MPI_Group_free(&world);
  if (code != MPI_SUCCESS)
    throw TransportError("rank " + std::to_string(worldRank) +
                         ": cannot make the communicator of ranks " +
                         rankList(ranks) + ": " + mpiError(code));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
}

MpiReducer::~MpiReducer() {
  reset();
  if (comm != MPI_COMM_NULL)
    MPI_Comm_free(&comm);
}

void MpiReducer::start(float *data, size_t count) {
  if (count > static_cast<size_t>(INT_MAX))
    throw TransportError("a gradient bucket of " + std::to_string(count) +
                         " floats is more than one MPI_Iallreduce carries");
  std::lock_guard<std::mutex> lock(mutex);
  MPI_Request request = MPI_REQUEST_NULL;
  int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count),
                            MPI_FLOAT, MPI_SUM, comm, &request);
  if (code != MPI_SUCCESS)
    throw TransportError("rank " + std::to_string(worldRank) +
                         ": MPI_Iallreduce over ranks " + rankList(ranks) +
                         " failed: " + mpiError(code));
  requests.push_back(request);
}

void MpiReducer::waitAll() {
  double begin = steadySeconds();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      int done = 0;
      int code = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                             &done, MPI_STATUSES_IGNORE);
      if (code != MPI_SUCCESS)
        throw TransportError("rank " + std::to_string(worldRank) +
                             ": the gradient sum over ranks " +
                             rankList(ranks) + " failed: " + mpiError(code));
      if (done) {
        requests.clear();
        return;
      }
    }
    if (aborted)
      throw TransportError("the gradient sum over ranks " + rankList(ranks) +
                           " stopped: " + abortReason);
    if (steadySeconds() - begin > timeoutSeconds)
      throw TransportError(
          "rank " + std::to_string(worldRank) +
          ": the gradient sum over ranks " + rankList(ranks) +
          " did not complete in " +
          std::to_string(static_cast<int>(timeoutSeconds)) +
          " s (a replica stopped or hangs; GPIPE_MPI_TIMEOUT sets the limit)");
    // Each test advances the collective's rounds.
    pauseBetweenTests(begin, steadySeconds());
  }
}

void MpiReducer::abort(const std::string &why) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (abortReason.empty())
      abortReason = why;
  }
  aborted = true;
}

void MpiReducer::reset() {
  std::lock_guard<std::mutex> lock(mutex);
  // A non-blocking collective can be neither cancelled nor freed: after a
  // failed step (which ends the job: the trainer aborts every rank) what
  // is left is only forgotten.
  requests.clear();
  aborted = false;
  abortReason.clear();
}

} // namespace gpipe::runtime
