// Where a stage's profiled steps went, part by part (gpipe-run
// --profile-ops): see StepProfile.h.
#include "StepProfile.h"

namespace gpipe::runtime {

std::vector<TrainingSession::StageStats::Part>
stepParts(const StreamRunner &runner) {
  using Part = TrainingSession::StageStats::Part;
  const StageExecutor &exec = runner.executor();
  const StreamRunner::Breakdown &b = runner.breakdown();
  size_t phases[2] = {runner.forwardIndex(), runner.backwardIndex()};
  auto total = [](const std::vector<std::vector<double>> &seconds,
                  size_t phase) {
    double sum = 0;
    if (phase < seconds.size())
      for (double s : seconds[phase])
        sum += s;
    return sum;
  };
  Part kernels{"kernels"}, loops{"generated loops"},
      between{"stage code between them"};
  double *sides[3][2] = {{&kernels.forward, &kernels.backward},
                         {&loops.forward, &loops.backward},
                         {&between.forward, &between.backward}};
  // A split backward's weight part counts with the backward.
  size_t weight = runner.weightIndex();
  for (int side = 0; side < 2; ++side) {
    *sides[0][side] = total(exec.kernelSeconds(), phases[side]);
    *sides[1][side] = total(exec.loopSeconds(), phases[side]);
    if (side == 1) {
      *sides[0][side] += total(exec.kernelSeconds(), weight);
      *sides[1][side] += total(exec.loopSeconds(), weight);
    }
    *sides[2][side] = b.phaseRuns[side] - *sides[0][side] - *sides[1][side];
  }
  std::vector<Part> parts{kernels,
                          loops,
                          between,
                          {"stash copies", b.stash[0], b.stash[1]},
                          {"data inputs", b.dataInputs[0], b.dataInputs[1]},
                          {"messages", b.messages[0], b.messages[1]},
                          {"message waits", b.waits[0], b.waits[1]},
                          {"turn waits", b.turnWaits, 0},
                          {"gradient sums", 0, b.gradientSums},
                          {"gradient exchange", b.exchange, 0},
                          {"optimizer step", b.optimizer - b.exchange, 0}};
  double timed = 0;
  for (const Part &p : parts)
    timed += p.forward + p.backward;
  parts.push_back({"unattributed", b.steps - timed, 0});
  return parts;
}

} // namespace gpipe::runtime
