//===- PipelinePlan.cpp - A training plan as a value ----------------------===//
#include "Analysis/Planner/PipelinePlan.h"
#include "Analysis/Planner/ScheduleGenerator.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>

using namespace gpipe;

std::optional<ScheduleKind> gpipe::parseScheduleKind(llvm::StringRef text) {
  for (const ScheduleKindInfo &info : scheduleKinds())
    if (info.name == text)
      return info.kind;
  return std::nullopt;
}

std::optional<RecomputePolicy>
gpipe::parseRecomputePolicy(llvm::StringRef text) {
  return llvm::StringSwitch<std::optional<RecomputePolicy>>(text)
      .Case("never", RecomputePolicy::Never)
      .Case("always", RecomputePolicy::Always)
      .Case("except-last", RecomputePolicy::ExceptLast)
      .Case("auto", RecomputePolicy::Auto)
      .Default(std::nullopt);
}

llvm::StringRef gpipe::toString(ScheduleKind kind) {
  return scheduleKindInfo(kind).name;
}

llvm::StringRef gpipe::toString(RecomputePolicy policy) {
  switch (policy) {
  case RecomputePolicy::Never:
    return "never";
  case RecomputePolicy::Always:
    return "always";
  case RecomputePolicy::ExceptLast:
    return "except-last";
  case RecomputePolicy::Auto:
    return "auto";
  }
  return "never";
}

bool gpipe::recomputesStage(RecomputePolicy policy, int64_t stage,
                            int64_t numStages) {
  return policy == RecomputePolicy::Always ||
         (policy == RecomputePolicy::ExceptLast && stage + 1 != numStages);
}

int64_t gpipe::activationsAlive(ScheduleKind kind, int64_t microBatches,
                                int64_t stage, int64_t numStages,
                                int64_t virtualStages) {
  return scheduleKindInfo(kind).inFlight(numStages, microBatches, stage,
                                         virtualStages);
}

std::string gpipe::StagePlacement::key() const {
  return "r" + std::to_string(rank) + ":" + device;
}

llvm::SmallVector<std::string>
gpipe::deviceKeys(llvm::ArrayRef<StagePlacement> stages) {
  llvm::SmallVector<std::string> keys;
  for (const StagePlacement &s : stages)
    keys.push_back(s.key());
  return keys;
}

int64_t gpipe::rankOfDeviceName(llvm::StringRef name) {
  int64_t rank = 0;
  if (name.consume_front("r") && !name.consumeInteger(10, rank) &&
      name.starts_with(":"))
    return rank;
  return 0;
}

llvm::SmallVector<std::string> gpipe::PipelinePlan::deviceKeys() const {
  return gpipe::deviceKeys(stages);
}

int64_t gpipe::PipelinePlan::virtualStages() const {
  return virtualStagesOf(deviceKeys(), scheduleKindInfo(schedule).layout);
}

int64_t gpipe::PipelinePlan::alive(int64_t stage) const {
  // Only an interleaving kind reads the virtual stages (and they take a
  // pass over the devices).
  int64_t v = scheduleKindInfo(schedule).interleaves ? virtualStages() : 1;
  return activationsAlive(schedule, microBatches, stage, numStages(), v);
}

std::string gpipe::PipelinePlan::deviceList() const {
  std::string list;
  bool ranked =
      llvm::any_of(stages, [](const StagePlacement &s) { return s.rank != 0; });
  for (const StagePlacement &s : stages)
    list += (list.empty() ? "" : ",") +
            (ranked ? "r" + std::to_string(s.rank) + ":" : std::string()) +
            s.device;
  return list;
}
