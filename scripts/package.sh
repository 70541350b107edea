#!/bin/bash
# Builds gpipe's Debian packages from the build tree (docs/install.md):
# gpipe-runtime, gpipe-runtime-cuda, gpipe and python3-gpipe, written to
# build/packages (or DIR). Run scripts/build.sh first.
#
# usage: scripts/package.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
out=${1:-$build/packages}
if [ ! -f "$build/CPackConfig.cmake" ]; then
  echo "package: no configured build in $build (run scripts/build.sh first)" >&2
  exit 1
fi
ninja -C "$build" >/dev/null
mkdir -p "$out"
(cd "$build" && cpack -G DEB -B "$out.tmp" >/dev/null) || {
  echo "package: cpack failed (its log: $out.tmp/_CPack_Packages)" >&2
  exit 1
}
mv "$out.tmp"/*.deb "$out"/
rm -rf "$out.tmp"
for deb in "$out"/*.deb; do
  echo "package: $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version): $deb"
done
