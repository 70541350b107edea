// The instructions of a device's stream in the compiler's static schedule:
// the gpipe dialect's schedule ops, and the manifest's "instructions".
#ifndef GPIPE_COMMON_INSTRUCTION_H
#define GPIPE_COMMON_INSTRUCTION_H

#include <optional>
#include <string_view>

namespace gpipe {

enum class InstructionOp {
  Forward,
  Recompute,
  Backward,
  /// A backward in two parts (zero-bubble schedules): the input gradients
  /// (B, what the previous stage waits for), then the parameter gradients
  /// (W, what only the optimizer needs).
  BackwardInput,
  BackwardWeight,
  SendActivation,
  RecvActivation,
  SendGradient,
  RecvGradient,
  OptimizerStep
};

/// "forward", "send_activation", ...: the op's name in the gpipe dialect
/// (without "gpipe.") and in the manifest.
std::string_view instructionName(InstructionOp op);
std::optional<InstructionOp> instructionFromName(std::string_view name);
/// Sends and receives: instructions with a peer stage.
bool isTransfer(InstructionOp op);
/// A send (of an activation or a gradient): it never waits.
bool isSend(InstructionOp op);

} // namespace gpipe

#endif // GPIPE_COMMON_INSTRUCTION_H
