#include "gpipe/common/Role.h"

#include <utility>

namespace gpipe {

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

template <typename E, size_t N>
std::string_view nameIn(const std::pair<E, std::string_view> (&table)[N],
                        E value) {
  for (const auto &[v, name] : table)
    if (v == value)
      return name;
  return "?";
}

template <typename E, size_t N>
std::optional<E> valueIn(const std::pair<E, std::string_view> (&table)[N],
                         std::string_view name) {
  for (const auto &[v, n] : table)
    if (n == name)
      return v;
  return std::nullopt;
}
} // namespace

std::string_view roleName(Role role) { return nameIn(kRoles, role); }
std::optional<Role> roleFromName(std::string_view name) {
  return valueIn(kRoles, name);
}
std::string_view hyperName(Hyper hyper) { return nameIn(kHypers, hyper); }
std::optional<Hyper> hyperFromName(std::string_view name) {
  return valueIn(kHypers, name);
}

} // namespace gpipe
