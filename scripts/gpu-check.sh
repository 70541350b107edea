#!/usr/bin/env bash
# The checks and the benchmark of CUDA stages that need a GPU (docs/cuda.md).
#
#   scripts/gpu-check.sh all
#     on one machine with a GPU and the project's set-up (Debian 12, the
#     CUDA toolkit): installs and builds as the README says, then `prepare`,
#     `run` and `bench` below, with every model (ResNet-50 included).
#
# Or in two halves, where the GPU machine has nvcc, CMake and PyTorch but no
# Debian packages (bundles are compiled here, the runtime is built there):
#
#   scripts/gpu-check.sh prepare
#     here (gpipe built): compiles for cuda:0, with their CPU references,
#       - an MLP (inference against PyTorch; 20 AdamW steps with mse
#         against the same bundle on cpu:0; a cuda:0,cpu:0 pipeline against
#         cpu:0,cpu:0),
#       - the ONNX backend conformance cases (test/conformance, --split),
#       - the PyTorch training equivalence cases (test/e2e/
#         pytorch_training.py, --split; ResNet-18 left out: its bundles do
#         not fit what the device tool carries),
#       - the benchmark's models (bench/run_gpu_benchmarks.py; the
#         Transformer only: a ResNet bundle, with its weights twice (the
#         parameters and the ONNX model for --save-onnx), is larger than
#         what the device tool carries),
#     collects the runtime's dependencies (scripts/collect-device-deps.sh)
#     and packs it all into gpu-pack/payload.tar.xz.
#
#   scripts/gpu-check.sh run [CHECKS]   (on the GPU machine, carrying gpu-pack/)
#     unpacks, builds the runtime with CUDA (-DGPIPE_BUILD_COMPILER=OFF; cuDNN
#     from the toolkit or from PyTorch's nvidia-cudnn wheel), runs its
#     GoogleTests, measures the GPU (gpipe-run --calibrate=cuda:0) and runs
#     every check, then the benchmark; one line per check
#     and a summary; exit 1 if any fails. CHECKS: all (default) or some of
#     basic,conformance,train,bench (the build is kept between calls).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/gpu-check"
pack="$root/gpu-pack"
testdata=/usr/share/libonnx-testdata/data

prepare() {
  local models="${1:-split}"
  local opt="${GPIPE_OPT:-$root/build/bin/gpipe-opt}"
  local run="${GPIPE_RUN:-$root/build/bin/gpipe-run}"
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
  echo "gpu-check: compiling the conformance cases for cuda:0"
  /usr/bin/python3 "$root/test/conformance/onnx_backend.py" "$opt" "$run" \
    "$testdata" "$work/conformance" --devices=cuda:0 --split=compile | tail -1
  echo "gpu-check: compiling the training equivalence cases for cuda:0"
  local exclude=resnet18
  [ "$models" = all ] && exclude=
  GPIPE_DEVICES=cuda:0 GPIPE_SPLIT=compile GPIPE_EXCLUDE="$exclude" \
    /usr/bin/python3 "$root/test/e2e/pytorch_training.py" "$opt" "$run" \
    "$work/train" | tail -1
  local bench=transformer
  [ "$models" = all ] && bench=resnet18,resnet50,transformer
  /usr/bin/python3 "$root/bench/run_gpu_benchmarks.py" prepare "$work/bench" \
    --gpipe-opt "$opt" --models "$bench"
  [ "$models" = all ] && return
  "$root/scripts/collect-device-deps.sh" >/dev/null
  rm -rf "$pack" && mkdir -p "$pack"
  grep -qx '/gpu-pack/' "$root/.git/info/exclude" 2>/dev/null ||
    echo '/gpu-pack/' >>"$root/.git/info/exclude"
  tar -C "$root" -cf - gpu-check .devdeps | xz -T0 -6 >"$pack/payload.tar.xz"
  du -sh "$pack/payload.tar.xz"
  echo "gpu-check: prepared; on the GPU machine, carrying gpu-pack/:" \
    "scripts/gpu-check.sh run"
}

run() {
  # Which checks: all (default), or some of basic, conformance, train,
  # bench (comma-separated), e.g. to stay within a time limit per command.
  local checks="${1:-all}"
  want() { [ "$checks" = all ] || [[ ",$checks," == *",$1,"* ]]; }
  local build="${GPIPE_GPU_BUILD:-$root/build-gpu}"
  # The Python with PyTorch, NumPy and onnx (the GPU machine's python3).
  local py="${GPIPE_PYTHON:-python3}"
  # A new payload (or none unpacked yet) replaces gpu-check/ and .devdeps/.
  if [ -f "$pack/payload.tar.xz" ] &&
     [ "$pack/payload.tar.xz" -nt "$work/.unpacked" ]; then
    rm -rf "$work" "$root/.devdeps"
    tar -C "$root" -xJf "$pack/payload.tar.xz"
    touch "$work/.unpacked"
  fi
  if [ -z "${GPIPE_GPU_BUILD:-}" ]; then
    # cuDNN: the toolkit's, else PyTorch's nvidia-cudnn wheel.
    local cudnn
    cudnn="$("$py" -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null || true)"
    local generator=()
    [ -f "$build/CMakeCache.txt" ] || ! command -v ninja >/dev/null ||
      generator=(-G Ninja)
    cmake -S "$root" -B "$build" "${generator[@]}" -DGPIPE_BUILD_COMPILER=OFF \
      -DCMAKE_PREFIX_PATH="$root/.devdeps" -DCMAKE_BUILD_TYPE=Release \
      -DDNNL_LIBRARY="$root/.devdeps/lib/libdnnl.so.2" \
      -DGTEST_ROOT="$root/.devdeps" ${cudnn:+-DCUDNN_ROOT="$cudnn"} \
      >"$work/cmake.log"
    cmake --build "$build" -j"$(nproc)" >"$work/build.log"
    [ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn/lib:${LD_LIBRARY_PATH:-}"
  fi
  local bin="$build/bin" failed=0
  export LD_LIBRARY_PATH="$root/.devdeps/lib:${LD_LIBRARY_PATH:-}"
  result() { echo "$1 $2"; [ "$1" = PASS ] || failed=$((failed + 1)); }
  if want basic; then
    if "$bin/gpipe_runtime_tests" >"$work/gtest.log" 2>&1; then
      result PASS "runtime GoogleTests"
    else
      result FAIL "runtime GoogleTests (gpu-check/gtest.log)"
    fi
    "$bin/gpipe-run" --list-devices | grep -i cuda || true
    if "$bin/gpipe-run" --calibrate=cuda:0 --output="$work/gpu-profile.json" \
         2>"$work/calibrate.log"; then
      result PASS "GPU profile: $(grep -o 'cuda:0 .*' "$work/calibrate.log" | head -1)"
    else
      result FAIL "gpipe-run --calibrate=cuda:0 (gpu-check/calibrate.log)"
    fi
    # Inference on the GPU against PyTorch.
    if "$bin/gpipe-run" "$work/infer.gpipe" --infer --input x="$work/x.npy" \
         --output "$work/out" >"$work/infer.log" 2>&1 &&
       "$py" -c "import numpy as np, sys; a = np.load('$work/out/y.npy'); b = np.load('$work/expected.npy'); d = np.abs(a - b).max(); print('max diff', d); sys.exit(bool(d > 1e-4))"; then
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
      "$py" - "$work/$2.csv" "$work/$3.csv" <<'PY'
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
  fi
  if ! want conformance; then
    :
  elif "$py" "$root/test/conformance/onnx_backend.py" none "$bin/gpipe-run" \
       none "$work/conformance" --split=run --min-pass 150 \
       >"$work/conformance.log" 2>&1; then
    result PASS "ONNX conformance on cuda:0: $(tail -1 "$work/conformance.log")"
  else
    result FAIL "ONNX conformance on cuda:0 (gpu-check/conformance.log)"
  fi
  if ! want train; then
    :
  elif GPIPE_SPLIT=run "$py" "$root/test/e2e/pytorch_training.py" none \
       "$bin/gpipe-run" "$work/train" >"$work/train.log" 2>&1; then
    result PASS "PyTorch training equivalence on cuda:0: $(tail -1 "$work/train.log")"
  else
    result FAIL "PyTorch training equivalence on cuda:0 (gpu-check/train.log)"
  fi
  if ! want bench; then
    :
  elif "$py" "$root/bench/run_gpu_benchmarks.py" run "$work/bench" \
       --gpipe-bench "$bin/gpipe-bench" --markdown "$work/benchmarks.md" \
       >"$work/bench.log" 2>&1; then
    result PASS "benchmark against PyTorch eager (gpu-check/benchmarks.md)"
  else
    result FAIL "benchmark (gpu-check/bench.log)"
  fi
  if want bench; then cat "$work/benchmarks.md" 2>/dev/null || true; fi
  echo "gpu-check: $failed failed"
  [ "$failed" -eq 0 ]
}

case "${1:-}" in
all)
  "$root/scripts/install-deps.sh"
  "$root/scripts/build.sh"
  prepare all
  GPIPE_GPU_BUILD="$root/build" GPIPE_PYTHON=/usr/bin/python3 run
  ;;
prepare) prepare ;;
run) run "${2:-all}" ;;
*)
  echo "usage: scripts/gpu-check.sh all|prepare|run (see the top of this file)" >&2
  exit 2
  ;;
esac
