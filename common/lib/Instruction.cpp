#include "gpipe/common/Instruction.h"

#include "NameTable.h"

namespace gpipe {

namespace {
constexpr std::pair<InstructionOp, std::string_view> kInstructions[] = {
    {InstructionOp::Forward, "forward"},
    {InstructionOp::Recompute, "recompute"},
    {InstructionOp::Backward, "backward"},
    {InstructionOp::BackwardInput, "backward_input"},
    {InstructionOp::BackwardWeight, "backward_weight"},
    {InstructionOp::SendActivation, "send_activation"},
    {InstructionOp::RecvActivation, "recv_activation"},
    {InstructionOp::SendGradient, "send_gradient"},
    {InstructionOp::RecvGradient, "recv_gradient"},
    {InstructionOp::OptimizerStep, "optimizer_step"}};
} // namespace

std::string_view instructionName(InstructionOp op) {
  return detail::nameIn(kInstructions, op);
}

std::optional<InstructionOp> instructionFromName(std::string_view name) {
  return detail::valueIn(kInstructions, name);
}

bool isSend(InstructionOp op) {
  return op == InstructionOp::SendActivation ||
         op == InstructionOp::SendGradient;
}

bool isTransfer(InstructionOp op) {
  return op == InstructionOp::SendActivation ||
         op == InstructionOp::RecvActivation ||
         op == InstructionOp::SendGradient || op == InstructionOp::RecvGradient;
}

} // namespace gpipe
