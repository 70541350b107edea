// Pins the calling thread to a set of cores (a stage's device, or the
// calibration's threads).
#ifndef GPIPE_RUNTIME_PINTHREAD_H
#define GPIPE_RUNTIME_PINTHREAD_H

#include <pthread.h>
#include <sched.h>

#include <vector>

namespace gpipe::runtime {

inline void pinThisThread(const std::vector<int> &cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores)
    CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_PINTHREAD_H
