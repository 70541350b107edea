// The x86-64 extensions of CpuFeatures.h: where CPUID reports each, and
// which register state the operating system must save for it.
#include "gpipe/common/CpuFeatures.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gpipe {

namespace {

/// The register state an extension's instructions need saved (XCR0).
enum class State { None, Ymm, Zmm, Tile };

/// An extension: LLVM's name, its CPUID leaf and sub-leaf, the register
/// (a, b, c or d) and bit that report it.
struct Feature {
  const char *name;
  unsigned leaf, subleaf;
  char reg;
  unsigned bit;
  State state;
};

constexpr unsigned kExtended = 0x80000001u;

// Intel SDM vol. 2A, CPUID; AMD APM vol. 3, appendix E. The state each
// needs as LLVM's host detection asks it (llvm::sys::getHostCPUFeatures),
// so that a bundle compiled for a machine loads on it.
constexpr Feature kFeatures[] = {
    {"cx8", 1, 0, 'd', 8, State::None},
    {"cmov", 1, 0, 'd', 15, State::None},
    {"mmx", 1, 0, 'd', 23, State::None},
    {"fxsr", 1, 0, 'd', 24, State::None},
    {"sse", 1, 0, 'd', 25, State::None},
    {"sse2", 1, 0, 'd', 26, State::None},
    {"sse3", 1, 0, 'c', 0, State::None},
    {"pclmul", 1, 0, 'c', 1, State::None},
    {"ssse3", 1, 0, 'c', 9, State::None},
    {"fma", 1, 0, 'c', 12, State::Ymm},
    {"cx16", 1, 0, 'c', 13, State::None},
    {"sse4.1", 1, 0, 'c', 19, State::None},
    {"sse4.2", 1, 0, 'c', 20, State::None},
    {"movbe", 1, 0, 'c', 22, State::None},
    {"popcnt", 1, 0, 'c', 23, State::None},
    {"aes", 1, 0, 'c', 25, State::None},
    {"xsave", 1, 0, 'c', 26, State::Ymm},
    {"avx", 1, 0, 'c', 28, State::Ymm},
    {"f16c", 1, 0, 'c', 29, State::Ymm},
    {"rdrnd", 1, 0, 'c', 30, State::None},
    {"fsgsbase", 7, 0, 'b', 0, State::None},
    {"bmi", 7, 0, 'b', 3, State::None},
    {"avx2", 7, 0, 'b', 5, State::Ymm},
    {"bmi2", 7, 0, 'b', 8, State::None},
    {"invpcid", 7, 0, 'b', 10, State::None},
    {"avx512f", 7, 0, 'b', 16, State::Zmm},
    {"avx512dq", 7, 0, 'b', 17, State::Zmm},
    {"rdseed", 7, 0, 'b', 18, State::None},
    {"adx", 7, 0, 'b', 19, State::None},
    {"avx512ifma", 7, 0, 'b', 21, State::Zmm},
    {"clflushopt", 7, 0, 'b', 23, State::None},
    {"clwb", 7, 0, 'b', 24, State::None},
    {"avx512cd", 7, 0, 'b', 28, State::Zmm},
    {"sha", 7, 0, 'b', 29, State::None},
    {"avx512bw", 7, 0, 'b', 30, State::Zmm},
    {"avx512vl", 7, 0, 'b', 31, State::Zmm},
    {"prefetchwt1", 7, 0, 'c', 0, State::None},
    {"avx512vbmi", 7, 0, 'c', 1, State::Zmm},
    {"pku", 7, 0, 'c', 4, State::None}, // OSPKE: enabled by the OS
    {"waitpkg", 7, 0, 'c', 5, State::None},
    {"avx512vbmi2", 7, 0, 'c', 6, State::Zmm},
    {"shstk", 7, 0, 'c', 7, State::None},
    {"gfni", 7, 0, 'c', 8, State::None},
    {"vaes", 7, 0, 'c', 9, State::Ymm},
    {"vpclmulqdq", 7, 0, 'c', 10, State::Ymm},
    {"avx512vnni", 7, 0, 'c', 11, State::Zmm},
    {"avx512bitalg", 7, 0, 'c', 12, State::Zmm},
    {"avx512vpopcntdq", 7, 0, 'c', 14, State::Zmm},
    {"rdpid", 7, 0, 'c', 22, State::None},
    {"movdiri", 7, 0, 'c', 27, State::None},
    {"movdir64b", 7, 0, 'c', 28, State::None},
    {"avx512vp2intersect", 7, 0, 'd', 8, State::Zmm},
    {"serialize", 7, 0, 'd', 14, State::None},
    {"tsxldtrk", 7, 0, 'd', 16, State::None},
    {"amx-bf16", 7, 0, 'd', 22, State::Tile},
    {"avx512fp16", 7, 0, 'd', 23, State::Zmm},
    {"amx-tile", 7, 0, 'd', 24, State::Tile},
    {"amx-int8", 7, 0, 'd', 25, State::Tile},
    {"avxvnni", 7, 1, 'a', 4, State::Ymm},
    {"avx512bf16", 7, 1, 'a', 5, State::Zmm},
    {"xsaveopt", 0xd, 1, 'a', 0, State::Ymm},
    {"xsavec", 0xd, 1, 'a', 1, State::Ymm},
    {"xsaves", 0xd, 1, 'a', 3, State::Ymm},
    {"sahf", kExtended, 0, 'c', 0, State::None},
    {"lzcnt", kExtended, 0, 'c', 5, State::None},
    {"sse4a", kExtended, 0, 'c', 6, State::None},
    {"prfchw", kExtended, 0, 'c', 8, State::None},
    {"xop", kExtended, 0, 'c', 11, State::Ymm},
    {"fma4", kExtended, 0, 'c', 16, State::Ymm},
    {"tbm", kExtended, 0, 'c', 21, State::None},
};

#if defined(__x86_64__)
/// The XCR0 bits of the state `s` needs: x87/SSE and AVX's upper halves
/// (0x6), AVX-512's opmasks and upper registers (0xe0), AMX's tiles
/// (0x60000).
uint64_t stateBits(State s) {
  switch (s) {
  case State::None:
    return 0;
  case State::Ymm:
    return 0x6;
  case State::Zmm:
    return 0xe6;
  case State::Tile:
    return 0x60000;
  }
  return 0;
}

uint64_t xcr0() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) // OSXSAVE
    return 0;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

} // namespace

bool isKnownCpuFeature(std::string_view name) {
  return std::any_of(std::begin(kFeatures), std::end(kFeatures),
                     [&](const Feature &f) { return name == f.name; });
}

std::vector<std::string> hostCpuFeatures() {
  std::vector<std::string> names;
#if defined(__x86_64__)
  unsigned maxBasic = __get_cpuid_max(0, nullptr);
  unsigned maxExtended = __get_cpuid_max(0x80000000u, nullptr);
  uint64_t enabled = xcr0();
  // The table goes leaf by leaf: each (leaf, sub-leaf) read once (CPUID
  // traps to the hypervisor in a virtual machine).
  unsigned leaf = 0, subleaf = 0, r[4] = {0, 0, 0, 0};
  bool read = false;
  for (const Feature &f : kFeatures) {
    bool extended = f.leaf >= 0x80000000u;
    if ((extended ? maxExtended : maxBasic) < f.leaf)
      continue;
    if (!read || f.leaf != leaf || f.subleaf != subleaf) {
      leaf = f.leaf;
      subleaf = f.subleaf;
      __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
      read = true;
    }
    unsigned word = r[f.reg - 'a'];
    uint64_t need = stateBits(f.state);
    if ((word >> f.bit & 1u) && (enabled & need) == need)
      names.emplace_back(f.name);
  }
#endif
  return names;
}

std::vector<std::string>
missingCpuFeatures(const std::vector<std::string> &required,
                   const std::vector<std::string> &available) {
  std::vector<std::string> missing;
  for (const std::string &name : required)
    if (isKnownCpuFeature(name) &&
        std::find(available.begin(), available.end(), name) == available.end())
      missing.push_back(name);
  return missing;
}

std::string hostMicroarchitectureLevel() {
  // The levels of the x86-64 psABI (and LLVM's CPUs of those names).
  static const std::vector<std::string> v2 = {
      "cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"};
  static const std::vector<std::string> v3 = {
      "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"};
  static const std::vector<std::string> v4 = {"avx512f", "avx512bw", "avx512cd",
                                              "avx512dq", "avx512vl"};
  std::vector<std::string> host = hostCpuFeatures();
  auto has = [&](const std::vector<std::string> &level) {
    return missingCpuFeatures(level, host).empty();
  };
  if (!has(v2))
    return "x86-64";
  if (!has(v3))
    return "x86-64-v2";
  return has(v4) ? "x86-64-v4" : "x86-64-v3";
}

} // namespace gpipe
