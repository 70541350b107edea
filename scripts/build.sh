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

# `import gpipe` for Debian's Python (the one with PyTorch): a .pth file in
# its site directory names this build's package (python/CMakeLists.txt).
package="$build/python"
if [ -f "$package/gpipe/__init__.py" ]; then
  site="$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')"
  if mkdir -p "$site" 2>/dev/null && [ -w "$site" ]; then
    echo "$package" > "$site/gpipe.pth.tmp" && mv "$site/gpipe.pth.tmp" "$site/gpipe.pth"
    echo "build: import gpipe finds $package (through $site/gpipe.pth)"
  else
    echo "build: to import gpipe, export PYTHONPATH=$package"
  fi
fi
