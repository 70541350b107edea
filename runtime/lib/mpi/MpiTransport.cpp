#include "MpiTransport.h"

#include "MpiError.h"

#include "Clock.h"
#include "SpinWait.h"

#include <climits>
#include <thread>

namespace gpipe::runtime {

namespace {

void check(int code, const char *call, const MessageKey &key) {
  if (code != MPI_SUCCESS)
    throw TransportError(std::string(call) + " (" + key.str() +
                         ") failed: " + mpiError(code));
}
} // namespace

MpiTransport::MpiTransport(MPI_Comm parent, int64_t rank,
                           std::vector<int64_t> stageRanks_,
                           double timeoutSeconds)
    : rank(rank), stageRanks(std::move(stageRanks_)),
      timeoutSeconds(timeoutSeconds),
      local(static_cast<int64_t>(stageRanks.size())) {
  MPI_Comm_dup(parent, &comm);
  // Errors come back as codes (and become TransportErrors naming the
  // message), not MPI's default abort without a word.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int *limit = nullptr, found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &limit, &found);
  if (found && limit)
    tagLimit = *limit;
}

MpiTransport::~MpiTransport() {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto &[key, r] : receives)
    if (r.request != MPI_REQUEST_NULL) {
      MPI_Cancel(&r.request);
      MPI_Request_free(&r.request);
    }
  for (Pending &s : sends)
    if (s.request != MPI_REQUEST_NULL)
      MPI_Request_free(&s.request);
  MPI_Comm_free(&comm);
}

int MpiTransport::tagOf(const MessageKey &key) const {
  int64_t stages = static_cast<int64_t>(stageRanks.size());
  int64_t tag =
      ((key.microBatch * 3 + static_cast<int64_t>(key.kind)) * stages +
       key.from) *
          stages +
      key.to;
  if (tag < 0 || tag > tagLimit)
    throw TransportError("the " + key.str() + " needs MPI tag " +
                         std::to_string(tag) + ", above this MPI's limit " +
                         std::to_string(tagLimit) +
                         " (fewer micro-batches or stages)");
  return static_cast<int>(tag);
}

Transport::Message MpiTransport::acquire(const MessageKey &key, size_t bytes) {
  if (isLocal(key.to))
    return local.acquire(key, bytes);
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<Message> &free = pool[bytes];
  if (free.empty())
    return Message(bytes);
  Message m = std::move(free.back());
  free.pop_back();
  return m;
}

void MpiTransport::postSend(const MessageKey &key, Message message) {
  if (isLocal(key.to))
    return local.postSend(key, std::move(message));
  if (message.size() > static_cast<size_t>(INT_MAX))
    throw TransportError("the " + key.str() +
                         " is larger than 2 GiB, more "
                         "than one MPI message carries");
  int tag = tagOf(key);
  std::lock_guard<std::mutex> lock(mutex);
  Pending p;
  p.buffer = std::move(message);
  check(MPI_Isend(p.buffer.data(), static_cast<int>(p.buffer.size()), MPI_BYTE,
                  static_cast<int>(stageRanks[key.to]), tag, comm, &p.request),
        "MPI_Isend", key);
  sends.push_back(std::move(p));
}

void MpiTransport::postReceive(const MessageKey &key, size_t bytes) {
  if (isLocal(key.from))
    return local.postReceive(key, bytes);
  if (bytes > static_cast<size_t>(INT_MAX))
    throw TransportError("the " + key.str() +
                         " is larger than 2 GiB, more "
                         "than one MPI message carries");
  int tag = tagOf(key);
  std::lock_guard<std::mutex> lock(mutex);
  Pending &p = receives[keyOf(key)];
  if (p.request != MPI_REQUEST_NULL || !p.buffer.empty())
    return; // posted already
  std::vector<Message> &free = pool[bytes];
  if (free.empty()) {
    p.buffer.resize(bytes);
  } else {
    p.buffer = std::move(free.back());
    free.pop_back();
  }
  check(MPI_Irecv(p.buffer.data(), static_cast<int>(bytes), MPI_BYTE,
                  static_cast<int>(stageRanks[key.from]), tag, comm,
                  &p.request),
        "MPI_Irecv", key);
}

Transport::Message MpiTransport::wait(const MessageKey &key) {
  if (isLocal(key.from))
    return local.wait(key);
  double start = steadySeconds();
  int64_t peer = stageRanks[key.from];
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = receives.find(keyOf(key));
      if (it == receives.end())
        throw TransportError("stage " + std::to_string(key.to) +
                             " waits for the " + key.str() +
                             " without having posted its receive");
      int done = 0;
      MPI_Status status;
      check(MPI_Test(&it->second.request, &done, &status), "MPI_Test", key);
      if (done) {
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        Message m = std::move(it->second.buffer);
        receives.erase(it);
        if (static_cast<size_t>(count) != m.size())
          throw TransportError("rank " + std::to_string(peer) + " sent " +
                               std::to_string(count) + " bytes for the " +
                               key.str() + ", " + std::to_string(m.size()) +
                               " expected (ranks run different bundles?)");
        return m;
      }
      reapSends();
    }
    if (aborted)
      throw TransportError(
          "stage " + std::to_string(key.to) + ": no message from stage " +
          std::to_string(key.from) + " (" + key.str() + "): " + abortReason);
    if (steadySeconds() - start > timeoutSeconds)
      throw TransportError(
          "rank " + std::to_string(rank) + ": no " + key.str() + " from rank " +
          std::to_string(peer) + " for " +
          std::to_string(static_cast<int>(timeoutSeconds)) + " s (rank " +
          std::to_string(peer) +
          " stopped or hangs; GPIPE_MPI_TIMEOUT sets the limit)");
    pauseBetweenTests(start, steadySeconds());
  }
}

void MpiTransport::reapSends() {
  for (size_t i = 0; i < sends.size();) {
    int done = 0;
    MPI_Test(&sends[i].request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      ++i;
      continue;
    }
    Message m = std::move(sends[i].buffer);
    pool[m.size()].push_back(std::move(m));
    sends[i] = std::move(sends.back());
    sends.pop_back();
  }
}

void MpiTransport::release(const MessageKey &key, Message message) {
  if (isLocal(key.from))
    return local.release(key, std::move(message));
  std::lock_guard<std::mutex> lock(mutex);
  pool[message.size()].push_back(std::move(message));
}

void MpiTransport::abort(const std::string &why) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (abortReason.empty())
      abortReason = why;
  }
  aborted = true;
  local.abort(why);
}

void MpiTransport::reset() {
  local.reset();
  double start = steadySeconds();
  std::lock_guard<std::mutex> lock(mutex);
  // Every send of the step was received (the peers' streams wait for
  // them) unless the step failed: then drop what is left.
  while (!sends.empty() && !aborted && steadySeconds() - start < timeoutSeconds)
    reapSends();
  for (Pending &s : sends)
    if (s.request != MPI_REQUEST_NULL)
      MPI_Request_free(&s.request);
  sends.clear();
  for (auto &[key, r] : receives)
    if (r.request != MPI_REQUEST_NULL) {
      MPI_Cancel(&r.request);
      MPI_Request_free(&r.request);
    }
  receives.clear();
  aborted = false;
  abortReason.clear();
}

} // namespace gpipe::runtime
