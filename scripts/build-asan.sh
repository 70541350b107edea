#!/usr/bin/env bash
# Configures the one AddressSanitizer + UndefinedBehaviorSanitizer build,
# build-asan/ (GPIPE_ASAN_BUILD_DIR), and builds the TARGETs named:
#   scripts/build-asan.sh TARGET...
# clang-19, every library instrumented for libFuzzer as well
# (-fsanitize=fuzzer-no-link), so that the same objects serve
#   - scripts/check-sanitizers.sh: gpipe-opt on the importer and dialect tests,
#   - scripts/check-runtime-sanitizers.sh address: gpipe-run, the runtime's
#     GoogleTests and the Python module,
#   - scripts/fuzz.sh: the libFuzzer targets of test/fuzz.
# One build instead of three: each compiled the runtime, and two the
# importer and dialects, again (docs/testing.md, "CI time").
# -O1 and line tables, as AddressSanitizer suggests. Debian's LLVM/MLIR is
# built without RTTI: no vptr check. CUDA is off: no GPU here runs it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_ASAN_BUILD_DIR:-$root/build-asan}"

for tool in clang-19 clang++-19; do
  command -v "$tool" >/dev/null ||
    { echo "build-asan.sh: $tool not found (scripts/install-deps.sh installs clang-19, libclang-rt-19-dev and libomp-19-dev)" >&2; exit 2; }
done
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$root")}"

# A directory configured by an older script (gcc, or the fuzzers alone)
# is configured again from scratch.
if [ -f "$build/CMakeCache.txt" ] &&
  ! grep -q '^GPIPE_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi

# No function check either: it reads the 8 bytes before the target of
# every indirect call for a type signature, and a stage's generated entry
# points (no signature, code mapped at a page start) are called that way.
flags="-fsanitize=fuzzer-no-link,address,undefined"
flags+=" -fno-sanitize=vptr,function"
flags+=" -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -G Ninja -S "$root" -B "$build" \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DGPIPE_FUZZ=ON -DGPIPE_SANITIZE= -DGPIPE_ENABLE_CUDA=OFF >/dev/null
[ $# -eq 0 ] || ninja -C "$build" "$@"
