#!/usr/bin/env bash
# The test command: installs the dependencies (apt), builds everything and
# runs every test (lit suites, GoogleTest, end-to-end PyTorch tests, the
# runtime link check) through ctest, then the importer and dialect tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer. Exits non-zero
# if anything fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
start=$(date +%s)

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
(cd "${GPIPE_BUILD_DIR:-$root/build}" && ctest -j"$(nproc)" --output-on-failure)
"$root/scripts/check-sanitizers.sh"

echo "scripts/test.sh: all tests passed in $(( $(date +%s) - start )) s"
