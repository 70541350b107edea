#include "gpipe/common/KernelKind.h"

#include <iterator>

namespace gpipe {

namespace {

// Operand, result and attribute names of the nn ops (dialects/NN/IR/
// NNOps.td) that run as kernels.
constexpr std::string_view kNone[] = {""};
constexpr std::string_view kInput[] = {"input"}, kOutput[] = {"output"},
                           kGradInput[] = {"grad_input"};
constexpr std::string_view kGemmOperands[] = {"a", "b", "c"},
                           kGemmAttributes[] = {"alpha", "beta", "trans_a",
                                                "trans_b", "compute_type"};
// compute_type: "f32" or "bf16" (operands multiplied in bfloat16, summed
// in float32; nn's ComputeTypeOpInterface).
constexpr std::string_view kMatmulOperands[] = {"lhs", "rhs"},
                           kMatmulAttributes[] = {"compute_type"};
constexpr std::string_view kConvOperands[] = {"input", "weight", "bias"},
                           kConvAttributes[] = {"strides", "pads", "dilations",
                                                "group", "compute_type"};
constexpr std::string_view kMaxPoolAttributes[] = {
    "kernel_shape", "strides", "pads", "dilations", "ceil_mode"};
constexpr std::string_view kAvgPoolAttributes[] = {
    "kernel_shape", "strides", "pads", "ceil_mode", "count_include_pad"};
constexpr std::string_view kBatchNormOperands[] = {"input", "scale", "bias",
                                                   "mean", "var"},
                           kBatchNormResults[] = {"output", "saved_mean",
                                                  "saved_var"},
                           kBatchNormAttributes[] = {"epsilon", "momentum",
                                                     "training"};
constexpr std::string_view kAxis[] = {"axis"};
constexpr std::string_view kLayerNormOperands[] = {"input", "scale", "bias"},
                           kLayerNormAttributes[] = {"axis", "epsilon"};
constexpr std::string_view kCrossEntropyOperands[] = {"logits", "labels"},
                           kLoss[] = {"loss"},
                           kCrossEntropyAttributes[] = {"ignore_index"};
constexpr std::string_view kConvGradInputOperands[] = {"grad_output", "weight"},
                           kConvGradWeightOperands[] = {"grad_output", "input"},
                           kGradWeight[] = {"grad_weight"};
constexpr std::string_view kGradOutput[] = {"grad_output"};
constexpr std::string_view kBatchNormGradOperands[] = {"grad_output", "input",
                                                       "scale", "mean", "var"},
                           kNormGradResults[] = {"grad_input", "grad_scale",
                                                 "grad_bias"},
                           kBatchNormGradAttributes[] = {"epsilon", "training"};
constexpr std::string_view kLayerNormGradOperands[] = {"grad_output", "input",
                                                       "scale"};
constexpr std::string_view
    kAttentionOperands[] = {"query", "key", "value", "mask"},
    kAttentionResults[] = {"output", "logsumexp"},
    kAttentionAttributes[] = {"scale", "causal", "dropout_ratio", "stream"},
    kAttentionGradOperands[] = {"grad_output", "query",     "key", "value",
                                "output",      "logsumexp", "mask"},
    kAttentionGradResults[] = {"grad_query", "grad_key", "grad_value"};
constexpr std::string_view kSoftmaxGradOperands[] = {"grad_output", "output"};
constexpr std::string_view kCrossEntropyGradOperands[] = {"grad_loss", "logits",
                                                          "labels"},
                           kGradLogits[] = {"grad_logits"};
constexpr std::string_view kDropoutAttributes[] = {"ratio", "training",
                                                   "stream"},
                           kDropoutGradAttributes[] = {"ratio", "stream"};

template <size_t O, size_t R, size_t A>
constexpr KernelKind kind(std::string_view name,
                          const std::string_view (&operands)[O],
                          size_t optional, const std::string_view (&results)[R],
                          const std::string_view (&attributes)[A]) {
  return {name, operands, O, optional, results, R, attributes, A};
}
template <size_t O, size_t R>
constexpr KernelKind
kind(std::string_view name, const std::string_view (&operands)[O],
     size_t optional, const std::string_view (&results)[R]) {
  return {name, operands, O, optional, results, R, kNone, 0};
}

constexpr KernelKind kKinds[] = {
    kind("gemm", kGemmOperands, 1, kOutput, kGemmAttributes),
    kind("matmul", kMatmulOperands, 0, kOutput, kMatmulAttributes),
    kind("conv", kConvOperands, 1, kOutput, kConvAttributes),
    kind("max_pool", kInput, 0, kOutput, kMaxPoolAttributes),
    kind("avg_pool", kInput, 0, kOutput, kAvgPoolAttributes),
    kind("global_avg_pool", kInput, 0, kOutput),
    kind("batch_norm", kBatchNormOperands, 0, kBatchNormResults,
         kBatchNormAttributes),
    kind("softmax", kInput, 0, kOutput, kAxis),
    kind("log_softmax", kInput, 0, kOutput, kAxis),
    kind("attention", kAttentionOperands, 1, kAttentionResults,
         kAttentionAttributes),
    kind("layer_norm", kLayerNormOperands, 1, kOutput, kLayerNormAttributes),
    kind("softmax_cross_entropy", kCrossEntropyOperands, 0, kLoss,
         kCrossEntropyAttributes),
    kind("dropout", kInput, 0, kOutput, kDropoutAttributes),
    kind("conv_grad_input", kConvGradInputOperands, 0, kGradInput,
         kConvAttributes),
    kind("conv_grad_weight", kConvGradWeightOperands, 0, kGradWeight,
         kConvAttributes),
    kind("max_pool_grad", kConvGradWeightOperands, 0, kGradInput,
         kMaxPoolAttributes),
    kind("avg_pool_grad", kGradOutput, 0, kGradInput, kAvgPoolAttributes),
    kind("batch_norm_grad", kBatchNormGradOperands, 0, kNormGradResults,
         kBatchNormGradAttributes),
    kind("layer_norm_grad", kLayerNormGradOperands, 0, kNormGradResults,
         kLayerNormAttributes),
    kind("attention_grad", kAttentionGradOperands, 1, kAttentionGradResults,
         kAttentionAttributes),
    kind("softmax_grad", kSoftmaxGradOperands, 0, kGradInput, kAxis),
    kind("log_softmax_grad", kSoftmaxGradOperands, 0, kGradInput, kAxis),
    kind("softmax_cross_entropy_grad", kCrossEntropyGradOperands, 0,
         kGradLogits, kCrossEntropyAttributes),
    kind("dropout_grad", kGradOutput, 0, kGradInput, kDropoutGradAttributes),
};

std::optional<size_t> indexIn(const std::string_view *names, size_t size,
                              std::string_view name) {
  for (size_t i = 0; i < size; ++i)
    if (names[i] == name)
      return i;
  return std::nullopt;
}

} // namespace

std::optional<size_t> KernelKind::operandIndex(std::string_view name) const {
  return indexIn(operands, numOperands, name);
}

std::optional<size_t> KernelKind::resultIndex(std::string_view name) const {
  return indexIn(results, numResults, name);
}

const KernelKind *findKernelKind(std::string_view name) {
  for (const KernelKind &k : kKinds)
    if (k.name == name)
      return &k;
  return nullptr;
}

} // namespace gpipe
