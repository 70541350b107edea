#include "gpipe/common/Instruction.h"

#include <utility>

namespace gpipe {

namespace {
constexpr std::pair<InstructionOp, std::string_view> kInstructions[] = {
    {InstructionOp::Forward, "forward"},
    {InstructionOp::Recompute, "recompute"},
    {InstructionOp::Backward, "backward"},
    {InstructionOp::SendActivation, "send_activation"},
    {InstructionOp::RecvActivation, "recv_activation"},
    {InstructionOp::SendGradient, "send_gradient"},
    {InstructionOp::RecvGradient, "recv_gradient"},
    {InstructionOp::OptimizerStep, "optimizer_step"}};
} // namespace

std::string_view instructionName(InstructionOp op) {
  for (const auto &[o, name] : kInstructions)
    if (o == op)
      return name;
  return "?";
}

std::optional<InstructionOp> instructionFromName(std::string_view name) {
  for (const auto &[o, n] : kInstructions)
    if (n == name)
      return o;
  return std::nullopt;
}

bool isTransfer(InstructionOp op) {
  return op == InstructionOp::SendActivation ||
         op == InstructionOp::RecvActivation ||
         op == InstructionOp::SendGradient || op == InstructionOp::RecvGradient;
}

} // namespace gpipe
