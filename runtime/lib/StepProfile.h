// Where a stage's profiled steps went, part by part (gpipe-run
// --profile-ops): its kernels, its generated loops, the stage code's runs
// besides them, the runtime's parts (StreamRunner::Breakdown), and the
// rest of its steps' time as "unattributed".
#ifndef GPIPE_RUNTIME_STEPPROFILE_H
#define GPIPE_RUNTIME_STEPPROFILE_H

#include "StreamRunner.h"

#include "gpipe/runtime/TrainingSession.h"

#include <vector>

namespace gpipe::runtime {

/// The parts of `runner`'s steps since profiling started, in seconds summed
/// over those steps (the forwards' and the backwards' share apart).
std::vector<TrainingSession::StageStats::Part>
stepParts(const StreamRunner &runner);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_STEPPROFILE_H
