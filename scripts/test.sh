#!/usr/bin/env bash
# The test command: installs the dependencies (apt), builds everything and
# runs every test (lit suites, GoogleTest, end-to-end PyTorch tests, the
# runtime link check) through ctest, then the importer and dialect tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer, then the
# runtime under ThreadSanitizer and under ASan + UBSan
# (scripts/check-runtime-sanitizers.sh), then a 20-second libFuzzer smoke
# run of each parser (scripts/fuzz.sh). The three ASan phases share one
# build (scripts/build-asan.sh). Exits non-zero if anything fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
start=$(date +%s)

phase() { echo "scripts/test.sh: $1 done at $(( $(date +%s) - start )) s"; }

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
phase build
(cd "${GPIPE_BUILD_DIR:-$root/build}" && ctest -j"$(nproc)" --output-on-failure)
phase ctest
"$root/scripts/check-sanitizers.sh"
phase sanitizers
"$root/scripts/check-runtime-sanitizers.sh"
phase runtime-sanitizers
"$root/scripts/fuzz.sh" 20
phase fuzz

echo "scripts/test.sh: all tests passed in $(( $(date +%s) - start )) s"
