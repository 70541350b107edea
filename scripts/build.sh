#!/usr/bin/env bash
# Configures and builds gpipe (compiler, runtime, tests) in build/ with
# Ninja and ccache. Extra arguments go to CMake, e.g.
#   scripts/build.sh -DCMAKE_BUILD_TYPE=Debug
# GPIPE_BUILD_DIR overrides the build directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_BUILD_DIR:-$root/build}"
cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
ninja -C "$build"
