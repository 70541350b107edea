// Sums of float buffers over the replicas of a stage (data parallelism):
// the seam between the schedule interpreter and the collective library
// (MPI_Iallreduce on a communicator of the stage's replicas).
#ifndef GPIPE_RUNTIME_REDUCER_H
#define GPIPE_RUNTIME_REDUCER_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpipe::runtime {

class Reducer {
public:
  virtual ~Reducer() = default;
  /// Starts summing `count` floats at `data`, in place, over the replicas
  /// (every replica starts the same sums in the same order); returns at
  /// once. `data` stays untouched by the caller until waitAll().
  virtual void start(float *data, size_t count) = 0;
  /// Waits for every started sum. Throws TransportError when a replica
  /// does not take part in time or the reducer was aborted.
  virtual void waitAll() = 0;
  /// Wakes a waitAll() with TransportError (another stage failed).
  virtual void abort(const std::string &why) = 0;
  /// Ready for the next step: drops what a failed step left.
  virtual void reset() = 0;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_REDUCER_H
