#!/usr/bin/env bash
# The main job on the bundled example: installs the dependencies, builds
# gpipe, exports the Fashion-MNIST CNN of examples/ to ONNX with PyTorch,
# compiles it with gpipe-opt and prints its imported IR and a summary.
# (Training it arrives with the trainer; gpipe-run says so until then.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_BUILD_DIR:-$root/build}"
out="${GPIPE_DEMO_DIR:-$root/build/demo}"

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
mkdir -p "$out"
/usr/bin/python3 "$root/examples/fashion_mnist_cnn.py" --output "$out/fashion_mnist_cnn.onnx"

echo
echo "== gpipe-opt $out/fashion_mnist_cnn.onnx --emit=nn --batch-size=64 (parameter values elided) =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" --emit=nn --batch-size=64 \
  --mlir-elide-resource-strings-if-larger=16 -o "$out/fashion_mnist_cnn.mlir"
sed '/^{-#/,$d' "$out/fashion_mnist_cnn.mlir"
echo
echo "== gpipe-opt $out/fashion_mnist_cnn.onnx --emit=summary --batch-size=64 =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" --emit=summary --batch-size=64
echo
"$build/bin/gpipe-run" --version
