#include "gpipe/common/KernelFamily.h"

#include <iterator>

namespace gpipe {
namespace {

constexpr KernelTiming F = KernelTiming::Flops;
constexpr KernelTiming B = KernelTiming::Bytes;
constexpr KernelTiming L = KernelTiming::Loop;
constexpr KernelTiming T = KernelTiming::Taps;
constexpr KernelPlanes N = KernelPlanes::None;
constexpr KernelPlanes P = KernelPlanes::FeatureMaps;
constexpr KernelPlanes M = KernelPlanes::Matrices;

// name, timing, planes, converts parameters, nearest.
constexpr KernelFamily kFamilies[] = {
    {"matmul", F, N, false, ""},
    {"narrow_matmul", F, N, false, "matmul"},
    {"batched_matmul", F, M, false, "matmul"},
    {"narrow_batched_matmul", F, M, false, "batched_matmul"},
    {"attention", F, N, false, "batched_matmul"},
    {"attention_dropout", F, N, false, "attention"},
    {"conv", F, P, true, ""},
    {"depthwise_conv", F, P, true, ""},
    {"narrow_conv", F, P, true, "conv"},
    {"small_map_conv", F, P, true, "conv"},
    {"shallow_conv", F, P, true, "conv"},
    {"batch_norm", B, P, false, ""},
    {"batch_norm_columns", B, N, false, "batch_norm"},
    {"layer_norm", B, N, false, ""},
    {"softmax", B, N, false, ""},
    {"cross_entropy", B, N, false, "softmax"},
    {"pooling", T, P, false, ""},
    {"max_pool", T, P, false, "pooling"},
    {"dropout", B, N, false, ""},
    {"optimizer", B, N, false, ""},
    {"elementwise", L, N, false, ""},
    {"copy", L, N, false, ""},
    {"gelu", L, N, false, ""},
    // Products multiplied in bfloat16 (compute_type "bf16"): a profile
    // calibrated without them prices them as float32 ones.
    {"matmul_bf16", F, N, false, "matmul"},
    {"narrow_matmul_bf16", F, N, false, "narrow_matmul"},
    {"batched_matmul_bf16", F, M, false, "batched_matmul"},
    {"narrow_batched_matmul_bf16", F, M, false, "narrow_batched_matmul"},
    {"conv_bf16", F, P, true, "conv"},
    {"shallow_conv_bf16", F, P, true, "shallow_conv"},
};

} // namespace

std::string_view workUnit(KernelTiming timing) {
  switch (timing) {
  case KernelTiming::Flops:
    return "flops";
  case KernelTiming::Taps:
    return "taps";
  case KernelTiming::Bytes:
  case KernelTiming::Loop:
    return "bytes";
  }
  return "bytes";
}

const KernelFamily *findKernelFamily(std::string_view name) {
  for (const KernelFamily &f : kFamilies)
    if (f.name == name)
      return &f;
  return nullptr;
}

const KernelFamily *kernelFamiliesBegin() { return std::begin(kFamilies); }
const KernelFamily *kernelFamiliesEnd() { return std::end(kFamilies); }

} // namespace gpipe
