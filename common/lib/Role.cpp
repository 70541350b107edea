#include "gpipe/common/Role.h"

#include "NameTable.h"

namespace gpipe {

using detail::nameIn;
using detail::valueIn;

namespace {
constexpr std::pair<Role, std::string_view> kRoles[] = {
    {Role::Data, "data"},
    {Role::Output, "output"},
    {Role::Loss, "loss"},
    {Role::LossGrad, "loss_grad"},
    {Role::Activation, "activation"},
    {Role::OutputGrad, "output_grad"},
    {Role::InputGrad, "input_grad"},
    {Role::Stash, "stash"},
    {Role::Carry, "carry"},
    {Role::ParamGrad, "param_grad"},
    {Role::Hyper, "hyper"}};

constexpr std::pair<Hyper, std::string_view> kHypers[] = {
    {Hyper::LR, "lr"},
    {Hyper::WeightDecay, "weight_decay"},
    {Hyper::Momentum, "momentum"},
    {Hyper::Beta1, "beta1"},
    {Hyper::Beta2, "beta2"},
    {Hyper::Eps, "eps"},
    {Hyper::StepSize, "step_size"},
    {Hyper::BiasCorrection2, "bias_correction2"}};

constexpr std::pair<ParamKind, std::string_view> kParamKinds[] = {
    {ParamKind::Weight, "weight"},
    {ParamKind::Buffer, "buffer"},
    {ParamKind::OptimizerState, "optimizer_state"},
    {ParamKind::Constant, "constant"}};

} // namespace

std::string_view roleName(Role role) { return nameIn(kRoles, role); }
std::optional<Role> roleFromName(std::string_view name) {
  return valueIn(kRoles, name);
}
std::string_view paramKindName(ParamKind kind) {
  return nameIn(kParamKinds, kind);
}
std::optional<ParamKind> paramKindFromName(std::string_view name) {
  return valueIn(kParamKinds, name);
}
std::string_view hyperName(Hyper hyper) { return nameIn(kHypers, hyper); }
std::optional<Hyper> hyperFromName(std::string_view name) {
  return valueIn(kHypers, name);
}

} // namespace gpipe
