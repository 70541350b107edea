#!/bin/bash
# The installed tree stands alone (docs/install.md): `cmake --install` into
# a temporary prefix, then, in a mount namespace where the build tree is an
# empty directory (moved away, as far as the installed programs can tell),
# the installed gpipe-opt compiles an MLP exported by PyTorch, the installed
# gpipe-run trains it (the loss falling) and infers, and the installed
# Python package imports and trains it. Needs root for the namespace (as CI
# runs); exits 77 (skipped) without one.
#
# usage: check_install.sh BUILD_DIR CMAKE
set -euo pipefail
build=$(cd "$1" && pwd)
cmake=$2
if ! unshare --mount true 2>/dev/null; then
  echo "skipped: no mount namespace here (unshare --mount needs root)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in bin/gpipe-opt bin/gpipe-run lib/libgpipe_runtime.so \
         lib/python3/dist-packages/gpipe/__init__.py share/doc/gpipe/bundle.md; do
  test -e "$prefix/$f" || { echo "not installed: $f"; exit 1; }
done
# Nothing installed names the build tree.
if grep -rlF "$build" "$prefix" --exclude-dir=doc; then
  echo "installed files above name the build tree $build"
  exit 1
fi
# A model and data as a user has them, made before the build tree goes.
/usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
import torch
from torch import nn
work = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(),
                      nn.Linear(32, 10))
torch.onnx.export(model, torch.randn(16, 1, 8, 8), f"{work}/mlp.onnx",
                  input_names=["input"], output_names=["output"])
rng = np.random.RandomState(0)
np.savez(f"{work}/train.npz",
         input=rng.randn(64, 1, 8, 8).astype(np.float32),
         labels=rng.randint(0, 10, 64))
np.save(f"{work}/x.npy", rng.randn(16, 1, 8, 8).astype(np.float32))
PY
mkdir "$work/empty"
unshare --mount bash -euo pipefail -c '
  build=$1 prefix=$2 work=$3
  mount --bind "$work/empty" "$build"
  test ! -e "$build/bin/gpipe-run"
  cd "$work"
  # The libraries the installed programs load: the prefix'"'"'s, none missing.
  for p in "$prefix/bin/gpipe-opt" "$prefix/bin/gpipe-run"; do
    ldd "$p" > ldd.txt
    if grep -q "not found" ldd.txt; then cat ldd.txt; exit 1; fi
    grep -q "libgpipe_runtime.so => $prefix/bin/../lib/libgpipe_runtime.so" ldd.txt
  done
  "$prefix/bin/gpipe-opt" mlp.onnx --mode=train --devices=cpu:0 \
      --micro-batches=2 --lr=0.1 -o mlp.gpipe > compile.log
  "$prefix/bin/gpipe-run" mlp.gpipe --train --data=train.npz --no-shuffle \
      --steps=40 > train.log
  first=$(grep -m1 -o "loss [0-9.]*" train.log | cut -d" " -f2)
  last=$(grep -o "loss [0-9.]*" train.log | tail -n1 | cut -d" " -f2)
  /usr/bin/python3 -c "import sys; f, l = map(float, sys.argv[1:]); assert l < f, (f, l)" "$first" "$last"
  "$prefix/bin/gpipe-opt" mlp.onnx -o infer.gpipe
  "$prefix/bin/gpipe-run" infer.gpipe --infer --input input=x.npy --output out > infer.log
  test -e out/output.npy
  PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 - "$prefix" <<PY
import sys
import numpy as np
import gpipe
prefix = sys.argv[1]
assert gpipe.__file__.startswith(prefix), gpipe.__file__
# compile() runs the installed gpipe-opt (the package finds it beside it).
bundle = gpipe.compile("mlp.onnx", output="py.gpipe", micro_batches=2,
                       lr=0.1, devices="cpu:0", quiet=True)
data = np.load("train.npz")
losses = bundle.train(data["input"], data["labels"], steps=40)
assert losses[-1] < losses[0], (losses[0], losses[-1])
y = gpipe.load("infer.gpipe").infer(np.load("x.npy"))
print("python: imported", gpipe.__file__, "trained, inferred")
PY
' check "$build" "$prefix" "$work"
echo "installed tree: compiles, trains, infers and imports with the build tree gone"
