#!/usr/bin/env bash
# The main job on the bundled example: installs the dependencies, builds
# gpipe, exports the Fashion-MNIST CNN of examples/ to ONNX with PyTorch,
# shows its imported IR summary, measures this machine's cores and gpipe's
# kernels for the cost model, compiles it into a training pipeline of two
# stages on two CPU cores (cpu:0, cpu:1; 8 micro-batches, GPipe schedule),
# trains the pipeline for 3 epochs on Fashion-MNIST (Debian's
# dataset-fashion-mnist), printing progress, test accuracy and the
# pipeline's measured step and bubble against the prediction, writes the
# trained model as ONNX and a report with the schedule's timeline, and
# compares its throughput with the alternatives on the same two cores:
# the model as one stage on both cores with the whole batch, and PyTorch
# on both cores. If the pipeline is not the fastest, it says so.
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
echo "== gpipe-opt --calibrate --precision=fp32 -o profile.json (the cost model's figures for this machine's cores, float32 kernels) =="
"$build/bin/gpipe-opt" --calibrate --precision=fp32 -o "$out/profile.json"

common=(--batch-size=64 --optimizer=sgd --lr=0.05 --momentum=0.9
        --device-profile "$out/profile.json")

echo
echo "== gpipe-opt fashion_mnist_cnn.onnx --devices=cpu:0,cpu:1 --micro-batches=8 -o fashion_mnist_cnn.gpipe =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" \
  --devices=cpu:0,cpu:1 --micro-batches=8 --schedule=gpipe "${common[@]}" \
  --report "$out/pipeline.html" -o "$out/fashion_mnist_cnn.gpipe"
echo "wrote $out/fashion_mnist_cnn.gpipe and $out/pipeline.html"

# The best alternative on the same cores: one stage on both, the whole
# batch at once.
echo
echo "== one stage on both cores: gpipe-opt ... --devices=cpu:0-1 --plan=given, gpipe-run ... --steps=$baseline_steps =="
"$build/bin/gpipe-opt" "$out/fashion_mnist_cnn.onnx" --mode=train \
  --devices=cpu:0-1 --plan=given "${common[@]}" -o "$out/one_stage.gpipe" >/dev/null
"$build/bin/gpipe-run" "$out/one_stage.gpipe" --train --data "$data" \
  --steps "$baseline_steps" --metrics "$out/one_stage.jsonl" | tail -n 2

echo
echo "== gpipe-run fashion_mnist_cnn.gpipe --train ($epochs epochs) =="
"$build/bin/gpipe-run" "$out/fashion_mnist_cnn.gpipe" --train \
  --data "$data" --eval-data "$data" --epochs "$epochs" \
  --loss-log "$out/loss.csv" --metrics "$out/pipeline.jsonl" \
  --checkpoint-dir "$out/checkpoints" \
  --save-onnx "$out/fashion_mnist_cnn.trained.onnx"
echo "loss per step: $out/loss.csv"
echo "trained model: $out/fashion_mnist_cnn.trained.onnx"

# PyTorch on the same two cores (OpenBLAS single-threaded, two intra-op
# threads: its best on two cores here), the same model, batch and optimizer.
echo
echo "== PyTorch on both cores: $baseline_steps training steps =="
/usr/bin/python3 "$root/bench/demo_torch_steps.py" "$baseline_steps" \
  "$out/pytorch.json"

# Throughput of the three (gpipe: the last step line of --metrics, after
# each run's first step; PyTorch: its median step).
echo
/usr/bin/python3 - "$out/pipeline.jsonl" "$out/one_stage.jsonl" \
  "$out/pytorch.json" <<'PY'
import json, sys
def rate(path):
    steps = [json.loads(l) for l in open(path) if '"samples_per_s"' in l]
    return steps[-1]["samples_per_s"]
pipe, one = rate(sys.argv[1]), rate(sys.argv[2])
torch = json.load(open(sys.argv[3]))["samples_per_s"]
print(f"pipeline (cpu:0,cpu:1, M=8):      {pipe:7.0f} samples/s")
print(f"one stage on both cores (cpu:0-1): {one:7.0f} samples/s")
print(f"PyTorch on both cores:             {torch:7.0f} samples/s")
best = max(("the pipeline", pipe), ("one stage on both cores", one),
           ("PyTorch", torch), key=lambda kv: kv[1])
if best[0] == "the pipeline":
    print(f"the pipeline is the fastest here: {pipe / one:.2f}x one stage on "
          f"both cores, {pipe / torch:.2f}x PyTorch")
else:
    print(f"the pipeline is NOT the fastest here: {best[0]} is "
          f"({best[1] / pipe:.2f}x the pipeline)" +
          (": compile with --devices=cpu:0-1 instead (gpipe-opt --plan=auto "
           "weighs the plans for the cores)" if best[0].startswith("one")
           else ""))
PY
