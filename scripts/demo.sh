#!/usr/bin/env bash
# The main job on the bundled example: installs the dependencies, builds
# gpipe, exports the Fashion-MNIST CNN of examples/ to ONNX with PyTorch,
# shows its imported IR summary, measures this machine's cores for the cost
# model, compiles it into a training pipeline of two
# stages on two CPU cores (cpu:0, cpu:1; 4 micro-batches, GPipe schedule)
# and trains it for 3 epochs on Fashion-MNIST (Debian's
# dataset-fashion-mnist), printing progress, test accuracy and the
# pipeline's measured step and bubble against the prediction, and writes
# the trained model as ONNX and a report with the schedule's timeline.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_BUILD_DIR:-$root/build}"
out="${GPIPE_DEMO_DIR:-$root/build/demo}"
data=/usr/share/datasets/fashion-mnist
epochs="${GPIPE_DEMO_EPOCHS:-3}"

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
mkdir -p "$out"
/usr/bin/python3 "$root/examples/fashion_mnist_cnn.py" --output "$out/fashion_mnist_cnn.onnx"

echo
echo "== gpipe-opt fashion_mnist_cnn.onnx --emit=summary --batch-size=64 =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" --emit=summary --batch-size=64

echo
echo "== gpipe-opt --calibrate -o profile.json (the cost model's figures for this machine's cores) =="
"$build/bin/gpipe-opt" --calibrate -o "$out/profile.json"

echo
echo "== gpipe-opt fashion_mnist_cnn.onnx --mode=train --devices=cpu:0,cpu:1 --micro-batches=4 -o fashion_mnist_cnn.gpipe =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" --mode=train \
  --devices=cpu:0,cpu:1 --micro-batches=4 --schedule=gpipe \
  --device-profile "$out/profile.json" \
  --batch-size=64 --optimizer=sgd --lr=0.05 --momentum=0.9 \
  --report "$out/pipeline.html" -o "$out/fashion_mnist_cnn.gpipe"
echo "wrote $out/fashion_mnist_cnn.gpipe and $out/pipeline.html"

echo
echo "== gpipe-run fashion_mnist_cnn.gpipe --train ($epochs epochs) =="
"$build/bin/gpipe-run" "$out/fashion_mnist_cnn.gpipe" --train \
  --data "$data" --eval-data "$data" --epochs "$epochs" \
  --loss-log "$out/loss.csv" --checkpoint-dir "$out/checkpoints" \
  --save-onnx "$out/fashion_mnist_cnn.trained.onnx"
echo "loss per step: $out/loss.csv"
echo "trained model: $out/fashion_mnist_cnn.trained.onnx"
