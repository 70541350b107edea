#ifndef GPIPE_RUNTIME_DEVICETURN_H
#define GPIPE_RUNTIME_DEVICETURN_H

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace gpipe::runtime {

/// The order of the compute instructions of stages that share one device
/// (an interleaved schedule: Instruction::turn): each stage's thread
/// waits for its instruction's turn, runs it and passes the turn on, so
/// the device runs them one at a time in the order the compiler proved
/// free of deadlock. Receives wait outside a turn.
class DeviceTurn {
public:
  /// Blocks until `turn` is the device's next; TransportError once
  /// aborted.
  void acquire(int64_t turn);
  /// Passes the turn on to the next.
  void release();
  /// Wakes every waiter with TransportError(`why`) (a stage failed).
  void abort(const std::string &why);
  /// A new step: turn 0 next (every stage of the device idle).
  void reset();

private:
  std::mutex mutex;
  std::condition_variable changed;
  int64_t next = 0;
  bool aborted = false;
  std::string why;
};

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_DEVICETURN_H
