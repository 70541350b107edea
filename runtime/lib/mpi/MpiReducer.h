// Reducer on MPI: a communicator of the ranks that hold one stage's
// replicas, non-blocking MPI_Iallreduce (MPI_SUM) on it.
#ifndef GPIPE_RUNTIME_MPI_MPIREDUCER_H
#define GPIPE_RUNTIME_MPI_MPIREDUCER_H

#include "Reducer.h"

#include <mpi.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace gpipe::runtime {

class MpiReducer : public Reducer {
public:
  /// Every rank of `ranks` (ranks of MPI_COMM_WORLD, this one among them)
  /// creates it with the same `ranks` and `tag`, in the same order. A wait
  /// gives up after `timeoutSeconds`.
  MpiReducer(const std::vector<int64_t> &ranks, int tag, int64_t worldRank,
             double timeoutSeconds);
  ~MpiReducer() override;

  void start(float *data, size_t count) override;
  void waitAll() override;
  void abort(const std::string &why) override;
  void reset() override;

private:
  std::vector<int64_t> ranks;
  int64_t worldRank;
  double timeoutSeconds;
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests;
  std::mutex mutex;
  std::atomic<bool> aborted{false};
  std::string abortReason;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_MPI_MPIREDUCER_H
