#!/usr/bin/env bash
# Builds gpipe-opt with AddressSanitizer and UndefinedBehaviorSanitizer in
# build-asan/ (scripts/build-asan.sh: clang-19) and runs the importer and
# dialect tests with it: every malformed-model case (test/Import/ONNX/malformed_models.py) and every error
# test must pass with no sanitizer report (reports abort the process, so a
# report fails its test).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_ASAN_BUILD_DIR:-$root/build-asan}"

"$root/scripts/build-asan.sh" gpipe-opt

# allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons its slabs in our
# sanitized translation units but not in Debian's unsanitized MLIR
# libraries; whichever inline copy the linker keeps, mixing the two reports
# writes to freshly allocated memory as use-after-poison.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allow_user_poisoning=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# The ONNX backend node tests one per distinct set of op types
# (--param node_tests=sample): every one of them runs in the regular build.
python3 /usr/lib/llvm-19/build/utils/lit/lit.py -v --param node_tests=sample \
  "$build/test/dialects" "$build/test/Import"
