#!/bin/bash
# The Debian packages on a machine that never built gpipe (docs/install.md):
# a minimal Debian 12 root (debootstrap --variant=minbase), into which apt
# installs only gpipe-runtime and python3-gpipe from the built .deb files
# (and their dependencies from Debian). There, the main job's CNN, compiled
# outside with --target-cpu=x86-64-v3, trains with the same loss log as the
# build tree's gpipe-run gives it, as one process and as two MPI ranks, and
# infers the same outputs; `import gpipe` works with no PYTHONPATH; ldd of
# the installed gpipe-run names no CUDA, LLVM or MLIR library. Root only
# (debootstrap, chroot); the root is removed afterwards.
#
# usage: scripts/package-check.sh [PACKAGES_DIR]   (default build/packages;
#        scripts/package.sh builds them)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
debs=$(cd "${1:-$build/packages}" && pwd)
data=/usr/share/datasets/fashion-mnist
for p in gpipe-runtime python3-gpipe; do
  ls "$debs"/${p}_*.deb >/dev/null 2>&1 ||
    { echo "package-check: no $p package in $debs (run scripts/package.sh)" >&2; exit 1; }
done
command -v debootstrap >/dev/null ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}

work=$(mktemp -d /var/tmp/gpipe-package-check.XXXXXX)
chroot=$work/root
cleanup() {
  for m in dev/shm dev/pts dev sys proc; do
    mountpoint -q "$chroot/$m" 2>/dev/null && umount -l "$chroot/$m"
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "package-check: a minimal Debian 12 root from $mirror"
debootstrap --variant=minbase bookworm "$chroot" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
mount -t proc proc "$chroot/proc"
mount --rbind /sys "$chroot/sys"
mount --bind /dev "$chroot/dev"
mount -t tmpfs shm "$chroot/dev/shm"
mkdir -p "$chroot/debs" "$chroot/job"
cp "$debs"/gpipe-runtime_*.deb "$debs"/python3-gpipe_*.deb "$chroot/debs/"
in_root() {
  chroot "$chroot" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root DEBIAN_FRONTEND=noninteractive "$@"
}
echo "package-check: apt install gpipe-runtime python3-gpipe"
in_root apt-get update -qq
packages=()
for deb in "$chroot"/debs/*.deb; do packages+=("/debs/$(basename "$deb")"); done
in_root apt-get install -y -qq --no-install-recommends \
  "${packages[@]}" >"$work/apt.log" 2>&1 ||
  { tail -n 20 "$work/apt.log" >&2; exit 1; }

# The main job's model, compiled outside the root for a portable CPU.
job=$chroot/job
/usr/bin/python3 "$root/examples/fashion_mnist_cnn.py" --output "$job/cnn.onnx" >/dev/null 2>&1
cp -r "$data" "$job/data"
common=(--mode=train --batch-size=64 --target-cpu=x86-64-v3 --plan=given)
"$build/bin/gpipe-opt" "$job/cnn.onnx" "${common[@]}" --devices=cpu:0,cpu:1 \
  --micro-batches=8 -o "$job/pipeline.gpipe" >/dev/null
"$build/bin/gpipe-opt" "$job/cnn.onnx" "${common[@]}" \
  --devices=r0:cpu:0,r1:cpu:1 --micro-batches=8 -o "$job/ranks.gpipe" >/dev/null
"$build/bin/gpipe-opt" "$job/cnn.onnx" --batch-size=16 --target-cpu=x86-64-v3 \
  -o "$job/infer.gpipe" >/dev/null
/usr/bin/python3 -c "
import numpy as np
np.save('$job/x.npy', np.random.RandomState(0).rand(16, 1, 28, 28).astype(np.float32))"
train=(--train --data /job/data --no-shuffle --steps=30)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)

# The build tree's runtime, then the installed one, on the same bundles.
outside() { # the build tree's gpipe-run, /job being the root's
  "$build/bin/gpipe-run" "${@//\/job/$job}"
}
outside /job/pipeline.gpipe "${train[@]}" --loss-log /job/built.csv >/dev/null
"${mpi[@]}" "$build/bin/gpipe-run" "$job/ranks.gpipe" --train --data "$job/data" \
  --no-shuffle --steps=30 --loss-log "$job/built-ranks.csv" >/dev/null
outside /job/infer.gpipe --infer --input image=/job/x.npy --output /job/built-out >/dev/null

echo "package-check: in the root"
in_root gpipe-run --version | head -n1
in_root gpipe-run /job/pipeline.gpipe "${train[@]}" --loss-log /job/installed.csv >/dev/null
in_root "${mpi[@]}" gpipe-run /job/ranks.gpipe "${train[@]}" \
  --loss-log /job/installed-ranks.csv >/dev/null
in_root gpipe-run /job/infer.gpipe --infer --input image=/job/x.npy \
  --output /job/installed-out >/dev/null
in_root python3 -c "import gpipe; print('import gpipe:', gpipe.__file__)"
in_root python3 -c "
import glob, gpipe, numpy as np
y = gpipe.load('/job/infer.gpipe').infer(np.load('/job/x.npy'))
y = np.asarray(y[0] if isinstance(y, (list, tuple)) else y)
built = np.load(glob.glob('/job/built-out/*.npy')[0])
assert np.array_equal(y, built), 'python inference differs'
print('python: infers as gpipe-run does')"
in_root ldd /usr/bin/gpipe-run > "$work/ldd.txt"
if grep -Ei "cuda|cublas|cudnn|llvm|mlir|not found" "$work/ldd.txt"; then
  echo "package-check: the installed gpipe-run needs the libraries above" >&2
  exit 1
fi
cmp "$job/built.csv" "$job/installed.csv" ||
  { echo "package-check: the installed gpipe-run's loss log differs" >&2; exit 1; }
cmp "$job/built-ranks.csv" "$job/installed-ranks.csv" ||
  { echo "package-check: the two-rank loss logs differ" >&2; exit 1; }
diff -r "$job/built-out" "$job/installed-out" >/dev/null ||
  { echo "package-check: the inference outputs differ" >&2; exit 1; }
echo "package-check: ok: $(wc -l < "$job/installed.csv") loss-log lines equal (one process and two ranks), inference equal, gpipe-run needs no CUDA, LLVM or MLIR library, import gpipe works"
