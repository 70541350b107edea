#!/usr/bin/env bash
# The checks of CUDA stages that need a GPU (docs/cuda.md), in two halves:
#
#   scripts/gpu-check.sh prepare
#     here (gpipe built, Debian's PyTorch): exports an MLP with PyTorch,
#     compiles it with gpipe-opt for cuda:0 (inference; training with mse),
#     for cuda:0,cpu:0 (a GPU stage and a CPU stage) and for cpu:0 (the
#     reference), writes the data and PyTorch's outputs to gpu-check/, and
#     collects the runtime's dependencies (scripts/collect-device-deps.sh).
#
#   scripts/gpu-check.sh run
#     on a machine with a GPU, nvcc and CMake (carrying gpu-check/ and
#     .devdeps/): builds the runtime with CUDA (-DGPIPE_BUILD_COMPILER=OFF),
#     runs its GoogleTests, then each check, and prints one line per check
#     and a summary; exit 1 if any fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/gpu-check"

prepare() {
  local opt="${GPIPE_OPT:-$root/build/bin/gpipe-opt}"
  rm -rf "$work" && mkdir -p "$work"
  /usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
import torch
work = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                            torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 10))
torch.onnx.export(model, torch.randn(16, 32), f"{work}/mlp.onnx",
                  opset_version=17, do_constant_folding=False,
                  input_names=["x"], output_names=["y"])
rng = np.random.default_rng(0)
x = rng.standard_normal((64, 32), dtype=np.float32)
np.save(f"{work}/x.npy", x)
with torch.no_grad():
    np.save(f"{work}/expected.npy", model(torch.from_numpy(x)).numpy())
np.savez(f"{work}/mse.npz", x=x,
         labels=rng.standard_normal((64, 10), dtype=np.float32))
np.savez(f"{work}/classes.npz", x=x, labels=rng.integers(0, 10, 64))
PY
  "$opt" "$work/mlp.onnx" --devices=cuda:0 -o "$work/infer.gpipe"
  for devices in cuda:0 cpu:0; do
    "$opt" "$work/mlp.onnx" --mode=train --loss=mse --devices=$devices \
      --micro-batches=2 --optimizer=adamw --lr=1e-3 \
      -o "$work/mse-${devices%%:*}.gpipe" >/dev/null
  done
  for devices in cuda:0,cpu:0 cpu:0,cpu:0; do
    "$opt" "$work/mlp.onnx" --devices=$devices --micro-batches=4 \
      -o "$work/pipe-${devices%%:*}.gpipe" >/dev/null
  done
  "$root/scripts/collect-device-deps.sh"
  echo "gpu-check: prepared $work; on the GPU machine: scripts/gpu-check.sh run"
}

run() {
  local build="$root/build-gpu"
  cmake -S "$root" -B "$build" -DGPIPE_BUILD_COMPILER=OFF \
    -DCMAKE_PREFIX_PATH="$root/.devdeps" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
  local bin="$build/bin" failed=0
  export LD_LIBRARY_PATH="$root/.devdeps/lib:${LD_LIBRARY_PATH:-}"
  result() { echo "$1 $2"; [ "$1" = PASS ] || failed=$((failed + 1)); }
  if "$bin/gpipe_runtime_tests" >"$work/gtest.log" 2>&1; then
    result PASS "runtime GoogleTests"
  else
    result FAIL "runtime GoogleTests (gpu-check/gtest.log)"
  fi
  "$bin/gpipe-run" --version | grep CUDA || true
  # Inference on the GPU against PyTorch.
  if "$bin/gpipe-run" "$work/infer.gpipe" --infer --input x="$work/x.npy" \
       --output "$work/out" >"$work/infer.log" 2>&1 &&
     python3 -c "import numpy as np, sys; a = np.load('$work/out/y.npy'); b = np.load('$work/expected.npy'); d = np.abs(a - b).max(); print('max diff', d); sys.exit(d > 1e-4)"; then
    result PASS "inference on cuda:0 equals PyTorch (1e-4)"
  else
    result FAIL "inference on cuda:0 (gpu-check/infer.log)"
  fi
  # Training on the GPU against the same model on a CPU core.
  compare() { # name, bundle, reference bundle, data
    for b in "$2" "$3"; do
      "$bin/gpipe-run" "$work/$b.gpipe" --train --data "$work/$4" --steps 20 \
        --loss-log "$work/$b.csv" >"$work/$b.log" 2>&1 || return 1
    done
    python3 - "$work/$2.csv" "$work/$3.csv" <<'PY'
import sys
a = [float(l.split(",")[1]) for l in open(sys.argv[1]).readlines()[1:]]
b = [float(l.split(",")[1]) for l in open(sys.argv[2]).readlines()[1:]]
d = max(abs(x - y) for x, y in zip(a, b))
print("losses", a[0], "->", a[-1], "max diff", d)
sys.exit(len(a) != 20 or d > 1e-4)
PY
  }
  if compare mse mse-cuda mse-cpu mse.npz; then
    result PASS "20 AdamW steps on cuda:0 equal cpu:0 (1e-4)"
  else
    result FAIL "training on cuda:0 (gpu-check/mse-cuda.log)"
  fi
  if compare pipe pipe-cuda pipe-cpu classes.npz; then
    result PASS "a cuda:0,cpu:0 pipeline trains like cpu:0,cpu:0 (1e-4)"
  else
    result FAIL "the cuda:0,cpu:0 pipeline (gpu-check/pipe-cuda.log)"
  fi
  echo "gpu-check: $failed failed"
  [ "$failed" -eq 0 ]
}

case "${1:-}" in
prepare) prepare ;;
run) run ;;
*)
  echo "usage: scripts/gpu-check.sh prepare|run (see the top of this file)" >&2
  exit 2
  ;;
esac
