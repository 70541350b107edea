#include "gpipe/common/KernelFamily.h"

#include <iterator>

namespace gpipe {
namespace {

constexpr KernelTiming F = KernelTiming::Flops;
constexpr KernelTiming B = KernelTiming::Bytes;
constexpr KernelTiming L = KernelTiming::Loop;

// name, timing, over feature maps, converts parameters, nearest.
constexpr KernelFamily kFamilies[] = {
    {"matmul", F, false, false, ""},
    {"narrow_matmul", F, false, false, "matmul"},
    {"batched_matmul", F, false, false, "matmul"},
    {"attention", F, false, false, "batched_matmul"},
    {"attention_dropout", F, false, false, "attention"},
    {"conv", F, true, true, ""},
    {"depthwise_conv", F, true, true, ""},
    {"narrow_conv", F, true, true, "conv"},
    {"small_map_conv", F, true, true, "conv"},
    {"shallow_conv", F, true, true, "conv"},
    {"batch_norm", B, true, false, ""},
    {"batch_norm_columns", B, false, false, "batch_norm"},
    {"layer_norm", B, false, false, ""},
    {"softmax", B, false, false, ""},
    {"cross_entropy", B, false, false, "softmax"},
    {"pooling", B, true, false, ""},
    {"max_pool", B, true, false, "pooling"},
    {"dropout", B, false, false, ""},
    {"optimizer", B, false, false, ""},
    {"elementwise", L, false, false, ""},
    {"copy", L, false, false, ""},
    {"gelu", L, false, false, ""},
    // Products multiplied in bfloat16 (compute_type "bf16"): a profile
    // calibrated without them prices them as float32 ones.
    {"matmul_bf16", F, false, false, "matmul"},
    {"narrow_matmul_bf16", F, false, false, "narrow_matmul"},
    {"batched_matmul_bf16", F, false, false, "batched_matmul"},
    {"conv_bf16", F, true, true, "conv"},
    {"shallow_conv_bf16", F, true, true, "shallow_conv"},
};

} // namespace

const KernelFamily *findKernelFamily(std::string_view name) {
  for (const KernelFamily &f : kFamilies)
    if (f.name == name)
      return &f;
  return nullptr;
}

const KernelFamily *kernelFamiliesBegin() { return std::begin(kFamilies); }
const KernelFamily *kernelFamiliesEnd() { return std::end(kFamilies); }

} // namespace gpipe
