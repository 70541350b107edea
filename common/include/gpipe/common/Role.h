// What an input or output of a stage's phase is for: the compiler marks
// every stage argument and result with a role (the gpipe dialect's
// RoleAttr, whose cases are these), the manifest carries it, and the
// runtime wires stages by role, never by name.
#ifndef GPIPE_COMMON_ROLE_H
#define GPIPE_COMMON_ROLE_H

#include <optional>
#include <string_view>

namespace gpipe {

enum class Role {
  /// A model input read from the batch (features or labels).
  Data,
  /// A model output (logits): forward output of the last stage.
  Output,
  /// The mean loss of a micro-batch: forward output of the last stage.
  Loss,
  /// The backward seed of the loss (1/M): backward input of the last stage.
  LossGrad,
  /// A tensor that crosses a cut: forward output of the stage that computes
  /// it, forward input of the stages that use it.
  Activation,
  /// The gradient of an Activation output: backward input, received from
  /// the next stage.
  OutputGrad,
  /// The gradient of an Activation input: backward output, sent to the
  /// previous stage.
  InputGrad,
  /// A forward value the backward reads: forward output and backward input.
  Stash,
  /// A value the input-gradient phase computes that the weight-gradient
  /// phase reads (a backward split for zero-bubble schedules): output of
  /// @backward_input, input of @backward_weight, kept in between.
  Carry,
  /// A parameter's gradient: backward output (one micro-batch), optimizer
  /// input (summed over the micro-batches).
  ParamGrad,
  /// A scalar hyper-parameter the optimizer reads each step.
  Hyper,
};

/// Whether an input of a split backward's weight part with this role is
/// kept in the micro-batch's stash slot from the input part's run to its
/// own (a carry the input part computed, a gradient it received); its other
/// inputs are read again as the input part reads them.
constexpr bool keptForWeightPart(Role role) {
  return role == Role::Carry || role == Role::OutputGrad;
}

/// "data", "activation", "param_grad", ...
std::string_view roleName(Role role);
/// The role of a manifest name, or none.
std::optional<Role> roleFromName(std::string_view name);

/// What a tensor of a stage's parameter blob is: the compiler marks each
/// (gpipe.parameter), the manifest carries it, and the runtime decides by it
/// what a checkpoint, --save-params and --save-onnx hold.
enum class ParamKind {
  /// A trainable parameter: it gets a gradient and optimizer state.
  Weight,
  /// Model state that is not trained (BatchNorm running statistics).
  Buffer,
  /// The optimizer's state of a weight (momentum, Adam's moments).
  OptimizerState,
  /// A constant of the stage's code: read-only, never saved.
  Constant,
};

/// "weight", "buffer", "optimizer_state", "constant".
std::string_view paramKindName(ParamKind kind);
std::optional<ParamKind> paramKindFromName(std::string_view name);

/// The optimizer hyper-parameters of Role::Hyper inputs.
enum class Hyper {
  LR,
  WeightDecay,
  Momentum,
  Beta1,
  Beta2,
  Eps,
  StepSize,
  BiasCorrection2
};

/// "lr", "weight_decay", ..., "bias_correction2".
std::string_view hyperName(Hyper hyper);
std::optional<Hyper> hyperFromName(std::string_view name);

} // namespace gpipe

#endif // GPIPE_COMMON_ROLE_H
