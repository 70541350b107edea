// The bundle format version that gpipe-opt writes and gpipe-run reads
// (docs/bundle.md lists what each version changed).
#ifndef GPIPE_COMMON_BUNDLEFORMAT_H
#define GPIPE_COMMON_BUNDLEFORMAT_H

#include <cstdint>

namespace gpipe {

/// 6: roles, message layouts, backward wiring and per-stage parameters in
/// the manifest. 7: each parameter tensor has a kind (weight, buffer,
/// optimizer_state, constant) in place of "trainable". 8: the cross-entropy
/// kernels take `ignore_index`; the training section names it. 9: the
/// products' kernels (gemm, matmul, conv and its gradients) take
/// `compute_type`; the manifest says the bundle's `precision`. 10: a
/// carried tensor's `stash_dtype`. 11: a message tensor's `dtype` (an
/// activation carried in bfloat16). 12: a compute instruction's `turn` and
/// a stream's `device_group` (stages taking turns on one device).
constexpr int64_t kBundleFormatVersion = 12;

} // namespace gpipe

#endif // GPIPE_COMMON_BUNDLEFORMAT_H
