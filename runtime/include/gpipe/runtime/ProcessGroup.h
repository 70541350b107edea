// The processes of an mpirun job: this process's rank among them, and the
// transport their stages exchange messages through. Without MPI (not built
// in, or not launched by mpirun) there is no group: one process runs every
// stage.
#ifndef GPIPE_RUNTIME_PROCESSGROUP_H
#define GPIPE_RUNTIME_PROCESSGROUP_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpipe::runtime {

class Reducer;
class Transport;

class ProcessGroup {
public:
  /// The job this process was launched in by mpirun (MPI initialized with
  /// MPI_THREAD_MULTIPLE: every stage thread posts its own messages), or
  /// null when it was started on its own. Throws std::runtime_error when
  /// launched by mpirun but MPI is not built in or lacks thread support.
  static std::unique_ptr<ProcessGroup> fromLauncher();
  /// Whether this process looks started by mpirun (its environment).
  static bool launchedByMpirun();
  ~ProcessGroup(); // MPI_Finalize

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  /// The host this rank runs on.
  const std::string &host() const { return host_; }

  /// A transport for the stages of a pipeline whose stage s runs on rank
  /// stageRanks[s]; this rank runs its own stages. Messages between two
  /// stages of this rank stay in the process.
  std::unique_ptr<Transport>
  createTransport(const std::vector<int64_t> &stageRanks);

  /// Sums of float buffers over `ranks` (ranks of this job, this one among
  /// them): the gradients of one stage's data-parallel replicas. Every rank
  /// in `ranks` creates it with the same arguments, in the same order
  /// (`tag` tells apart the reducers of several stages).
  std::unique_ptr<Reducer> createReducer(const std::vector<int64_t> &ranks,
                                         int tag);

  /// Ends every rank of the job with `code` (MPI_Abort) after printing
  /// `why` (prefixed with this rank) to stderr.
  [[noreturn]] void abort(const std::string &why, int code = 1);

  /// The value `root` holds, on every rank.
  double broadcast(double value, int64_t root);
  /// The sum of every rank's `value`, on every rank (in rank order).
  double sum(double value);
  /// Every rank's `bytes`, by rank, on `root`; empty elsewhere.
  std::vector<std::string> gather(const std::string &bytes, int64_t root);
  /// Waits for every rank.
  void barrier();
  /// Median seconds a message of `bytes` takes from this rank to `peer` and
  /// back, over `repeats` round trips; `peer` calls it with this rank as
  /// its peer (gpipe-opt --calibrate's network figures).
  double roundTripSeconds(int64_t peer, size_t bytes, int repeats);
  /// Median seconds of a sum of `bytes` of floats over every rank of the
  /// job, through the reducer data parallelism uses (started, then waited
  /// for), over `repeats` sums; every rank calls it.
  double allReduceSeconds(size_t bytes, int repeats);

  ProcessGroup(const ProcessGroup &) = delete;
  ProcessGroup &operator=(const ProcessGroup &) = delete;

private:
  ProcessGroup(int64_t rank, int64_t size, std::string host);
  int64_t rank_, size_;
  std::string host_;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_PROCESSGROUP_H
