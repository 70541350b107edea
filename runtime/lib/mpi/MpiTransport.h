// Stage messages between the ranks of an mpirun job: non-blocking MPI
// point-to-point, posted in each stream's schedule order (a receive is
// posted before it is waited for, so that no sender waits on an unposted
// receive), tagged by (micro-batch, kind, sender, receiver); the message
// buffer is the only copy. Messages between two stages of this rank go
// through the in-process channels.
#ifndef GPIPE_RUNTIME_MPI_MPITRANSPORT_H
#define GPIPE_RUNTIME_MPI_MPITRANSPORT_H

#include "InProcessTransport.h"

#include <mpi.h>

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace gpipe::runtime {

class MpiTransport : public Transport {
public:
  /// Stage s runs on rank stageRanks[s] of `comm` (duplicated: the
  /// transport's messages never match anyone else's); this process is
  /// `rank`. A wait gives up after `timeoutSeconds` without the message.
  MpiTransport(MPI_Comm comm, int64_t rank, std::vector<int64_t> stageRanks,
               double timeoutSeconds);
  ~MpiTransport() override;

  Message acquire(const MessageKey &key, size_t bytes) override;
  void postSend(const MessageKey &key, Message message) override;
  void postReceive(const MessageKey &key, size_t bytes) override;
  Message wait(const MessageKey &key) override;
  void release(const MessageKey &key, Message message) override;
  void abort(const std::string &why) override;
  void reset() override;

private:
  using Key = std::tuple<int64_t, int64_t, int, int64_t>;
  static Key keyOf(const MessageKey &k) {
    return {k.from, k.to, static_cast<int>(k.kind), k.microBatch};
  }
  bool isLocal(int64_t stage) const { return stageRanks[stage] == rank; }
  int tagOf(const MessageKey &key) const;
  /// Completes the sends the receivers have taken (frees their buffers).
  void reapSends();

  MPI_Comm comm = MPI_COMM_NULL;
  int64_t rank;
  std::vector<int64_t> stageRanks;
  double timeoutSeconds;
  int tagLimit = 32767;
  InProcessTransport local;

  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    Message buffer;
  };
  std::mutex mutex; // the maps below and every MPI call on them
  std::vector<Pending> sends;
  std::map<Key, Pending> receives;
  std::map<size_t, std::vector<Message>> pool; // buffers by size
  std::atomic<bool> aborted{false};
  std::string abortReason;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_MPI_MPITRANSPORT_H
