// The bundle format version that gpipe-opt writes and gpipe-run reads
// (docs/bundle.md lists what each version changed).
#ifndef GPIPE_COMMON_BUNDLEFORMAT_H
#define GPIPE_COMMON_BUNDLEFORMAT_H

#include <cstdint>

namespace gpipe {

/// 6: roles, message layouts, backward wiring and per-stage parameters in
/// the manifest.
constexpr int64_t kBundleFormatVersion = 6;

} // namespace gpipe

#endif // GPIPE_COMMON_BUNDLEFORMAT_H
