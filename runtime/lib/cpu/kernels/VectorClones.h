// The instruction sets the backend's own vector loops are compiled for
// (the runtime is built for any x86-64 and picks the code the CPU runs):
//  - GPIPE_VECTOR_CLONES: one clone of a loop function per instruction set
//    (AVX-512, AVX2, baseline x86-64), picked by the dynamic loader (GCC's
//    function multi-versioning), for loops the compiler vectorizes itself
//    (BatchNormPlanes.cpp, SoftmaxRows.cpp). Empty elsewhere (other
//    compilers, other architectures).
//  - GPIPE_TARGET_AVX512 / GPIPE_TARGET_AVX2 and vectorIsa(): functions
//    written for one instruction set (intrinsics, or vectors of the width
//    its registers hold: NarrowConvPlanes.cpp), called where vectorIsa()
//    says the CPU has it.
#ifndef GPIPE_RUNTIME_CPU_KERNELS_VECTORCLONES_H
#define GPIPE_RUNTIME_CPU_KERNELS_VECTORCLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPIPE_VECTOR_CLONES                                                    \
  __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPIPE_VECTOR_CLONES
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#define GPIPE_HAVE_X86_ISAS 1
#define GPIPE_TARGET_AVX512 __attribute__((target("avx512f")))
#define GPIPE_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace gpipe::runtime::cpu {

/// Widest first.
enum class VectorIsa { Avx512, Avx2, Baseline };

/// The widest of the instruction sets above this CPU runs, or a narrower
/// one GPIPE_CPU_ISA names (avx512, avx2, baseline: the tests run every
/// body on one machine; never a wider one than the CPU has).
inline VectorIsa vectorIsa() {
  static const VectorIsa isa = [] {
    VectorIsa has =
        __builtin_cpu_supports("avx512f") ? VectorIsa::Avx512
        : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
            ? VectorIsa::Avx2
            : VectorIsa::Baseline;
    const char *cap = std::getenv("GPIPE_CPU_ISA");
    if (!cap || !*cap)
      return has;
    std::string_view name(cap);
    VectorIsa want = name == "avx512" ? VectorIsa::Avx512
                     : name == "avx2" ? VectorIsa::Avx2
                     : name == "baseline"
                         ? VectorIsa::Baseline
                         : throw std::invalid_argument(
                               "GPIPE_CPU_ISA=" + std::string(name) +
                               ": expected avx512, avx2 or baseline");
    return std::max(has, want);
  }();
  return isa;
}

} // namespace gpipe::runtime::cpu
#endif

#endif // GPIPE_RUNTIME_CPU_KERNELS_VECTORCLONES_H
