#!/usr/bin/env bash
# The main job on the bundled example: installs the dependencies, builds
# gpipe, exports the Fashion-MNIST CNN of examples/ to ONNX with PyTorch,
# shows its imported IR summary, measures this machine's cores for the cost
# model, compiles it into a training pipeline of two
# stages on two CPU cores (cpu:0, cpu:1; 8 micro-batches, GPipe schedule),
# measures the same model on one core for a few steps, trains the pipeline
# for 3 epochs on Fashion-MNIST (Debian's dataset-fashion-mnist), printing
# progress, test accuracy and the pipeline's measured step and bubble
# against the prediction, writes the trained model as ONNX and a report
# with the schedule's timeline, and prints both throughputs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_BUILD_DIR:-$root/build}"
out="${GPIPE_DEMO_DIR:-$root/build/demo}"
data=/usr/share/datasets/fashion-mnist
epochs="${GPIPE_DEMO_EPOCHS:-3}"
baseline_steps="${GPIPE_DEMO_BASELINE_STEPS:-150}"

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

common=(--batch-size=64 --optimizer=sgd --lr=0.05 --momentum=0.9
        --device-profile "$out/profile.json")

echo
echo "== gpipe-opt fashion_mnist_cnn.onnx --devices=cpu:0,cpu:1 --micro-batches=8 -o fashion_mnist_cnn.gpipe =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" \
  --devices=cpu:0,cpu:1 --micro-batches=8 --schedule=gpipe "${common[@]}" \
  --report "$out/pipeline.html" -o "$out/fashion_mnist_cnn.gpipe"
echo "wrote $out/fashion_mnist_cnn.gpipe and $out/pipeline.html"

# The same model and batch on one core, to measure what the pipeline gains.
echo
echo "== one device: gpipe-opt ... --devices=cpu:0, gpipe-run ... --steps=$baseline_steps =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" --mode=train \
  --devices=cpu:0 "${common[@]}" -o "$out/one_device.gpipe" >/dev/null
"$build/bin/gpipe-run" "$out/one_device.gpipe" --train --data "$data" \
  --steps "$baseline_steps" --metrics "$out/one_device.jsonl" | tail -n 2

echo
echo "== gpipe-run fashion_mnist_cnn.gpipe --train ($epochs epochs) =="
"$build/bin/gpipe-run" "$out/fashion_mnist_cnn.gpipe" --train \
  --data "$data" --eval-data "$data" --epochs "$epochs" \
  --loss-log "$out/loss.csv" --metrics "$out/pipeline.jsonl" \
  --checkpoint-dir "$out/checkpoints" \
  --save-onnx "$out/fashion_mnist_cnn.trained.onnx"
echo "loss per step: $out/loss.csv"
echo "trained model: $out/fashion_mnist_cnn.trained.onnx"

# Throughput of both runs: samples per second after each run's first step
# (the last step line of --metrics).
echo
/usr/bin/python3 - "$out/one_device.jsonl" "$out/pipeline.jsonl" <<'PY'
import json, sys
def rate(path):
    steps = [json.loads(l) for l in open(path) if '"samples_per_s"' in l]
    return steps[-1]["samples_per_s"]
one, pipe = rate(sys.argv[1]), rate(sys.argv[2])
print(f"one device (cpu:0):          {one:7.0f} samples/s")
print(f"pipeline (cpu:0,cpu:1, M=8): {pipe:7.0f} samples/s: {pipe / one:.2f}x one device")
PY
