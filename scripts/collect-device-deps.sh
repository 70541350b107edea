#!/usr/bin/env bash
# Collects into .devdeps/ the Debian-installed pieces the runtime needs on a
# machine that has only a CUDA toolkit and CMake (oneDNN, CLI11, ONNX's
# protobuf classes and GoogleTest headers and libraries), so that the runtime can be built and
# tested there with -DGPIPE_BUILD_COMPILER=OFF. See docs/testing.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.devdeps"
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib"
cp -r /usr/include/CLI /usr/include/gtest /usr/include/oneapi \
  /usr/include/nlohmann "$dest/include/"
cp /usr/include/dnnl*.h /usr/include/dnnl*.hpp "$dest/include/"
cp /usr/lib/x86_64-linux-gnu/libdnnl.so.2 "$dest/lib/"
cp /lib/x86_64-linux-gnu/libOpenCL.so.1 "$dest/lib/"
# ONNX's protobuf classes (TensorProto files, --save-onnx).
cp -r /usr/include/onnx /usr/include/google "$dest/include/"
cp /usr/lib/x86_64-linux-gnu/libonnx_proto.so.1 \
  /usr/lib/x86_64-linux-gnu/libprotobuf.so.32 "$dest/lib/"
ln -s libonnx_proto.so.1 "$dest/lib/libonnx_proto.so"
ln -s libprotobuf.so.32 "$dest/lib/libprotobuf.so"
cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$dest/lib/"
mkdir -p "$root/.git/info"
grep -qx '/.devdeps/' "$root/.git/info/exclude" 2>/dev/null ||
  echo '/.devdeps/' >> "$root/.git/info/exclude"
du -sh "$dest"
