// The x86-64 instruction-set extensions a bundle's native code may need:
// the compiler records those its target enables (manifest
// "target_features", by LLVM's names) and the runtime refuses a bundle
// whose code this machine's CPU cannot run, rather than die of an illegal
// instruction (docs/bundle.md).
#ifndef GPIPE_COMMON_CPUFEATURES_H
#define GPIPE_COMMON_CPUFEATURES_H

#include <string>
#include <string_view>
#include <vector>

namespace gpipe {

/// Whether `name` (LLVM's, "avx512f", "sse4.2", "amx-tile") is an
/// extension this table knows, which CPUID reports and the runtime checks.
bool isKnownCpuFeature(std::string_view name);

/// The known extensions this machine's CPU has and its operating system
/// enables (the vector registers' state saved: AVX's, AVX-512's and AMX's
/// in XCR0); none off x86-64.
std::vector<std::string> hostCpuFeatures();

/// Of `required`, the known extensions missing from `available`, in the
/// order of `required`; names this table does not know are not checked.
std::vector<std::string>
missingCpuFeatures(const std::vector<std::string> &required,
                   const std::vector<std::string> &available);

/// The x86-64 microarchitecture levels a bundle can be compiled for
/// portably (gpipe-opt --target-cpu=x86-64-v2, -v3, -v4): the highest this
/// machine runs, "x86-64" at least.
std::string hostMicroarchitectureLevel();

} // namespace gpipe

#endif // GPIPE_COMMON_CPUFEATURES_H
