"""Writes that fail: a full disk or a read-only directory during a
checkpoint, --save-onnx or --metrics is one clear error line (the file and
the system's reason), a non-zero exit, and the previous files are whole.

Each case runs in a private mount namespace (`unshare -m`, as root) where a
small tmpfs (a full disk) or a read-only bind mount stands in for the
user's directory, prepared with the files of an earlier, successful run;
after the failed run those files must be byte for byte what they were.

usage: disk_errors.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def snapshot(directory):
    files = {}
    for base, _, names in os.walk(directory):
        for n in names:
            path = os.path.join(base, n)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = f.read()
    return files


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if run(["unshare", "-m", "true"])[0] != 0:
        print("SKIP: needs root for private mounts (unshare -m)")
        print("0 passed, 0 failed")
        return 0
    onnx_path = os.path.join(work, "mlp.onnx")
    reference_models.export("mlp", onnx_path, batch=8)
    rng = np.random.RandomState(0)
    data = os.path.join(work, "data.npz")
    np.savez(data, input=rng.randn(64, 1, 28, 28).astype(np.float32),
             labels=rng.randint(0, 10, 64).astype(np.int64))
    bundle = os.path.join(work, "mlp.gpipe")
    rc, out = run([gpipe_opt, onnx_path, "--mode=train", "--batch-size=16",
                   "--micro-batches=2", "-o", bundle])
    if rc != 0:
        print(f"FAIL compile: {out}")
        return 1
    # The user's directory after an earlier, successful run of 4 steps.
    before = os.path.join(work, "before")
    os.makedirs(before)
    train = [gpipe_run, bundle, "--train", f"--data={data}"]
    rc, out = run(train + ["--steps=4", f"--checkpoint-dir={before}/ck",
                           "--checkpoint-every=2",
                           f"--metrics={before}/metrics.jsonl",
                           f"--save-onnx={before}/trained.onnx"])
    if rc != 0:
        print(f"FAIL the first run: {out}")
        return 1
    old = snapshot(before)
    # A file that fills the tmpfs (16 MiB, the previous files and room) to
    # its last bytes.
    filler = "dd if=/dev/zero of=$D/filler bs=4k 2>/dev/null || true"
    cases = [
        ("a checkpoint on a full disk", "tmpfs", filler,
         ["--steps=8", "--resume", "--checkpoint-dir=$D/ck",
          "--checkpoint-every=2"], ["ck/", "No space left on device"]),
        ("--save-onnx on a full disk", "tmpfs", filler,
         ["--steps=2", "--save-onnx=$D/trained.onnx"],
         ["trained.onnx", "No space left on device"]),
        ("--metrics of a resumed run on a full disk", "tmpfs", filler,
         ["--steps=8", "--resume", "--checkpoint-dir=$D/ck",
          "--metrics=$D/metrics.jsonl"],
         ["metrics.jsonl", "No space left on device"]),
        ("a checkpoint in a read-only directory", "ro", "true",
         ["--steps=8", "--resume", "--checkpoint-dir=$D/ck",
          "--checkpoint-every=2"], ["ck/", "Read-only file system"]),
        ("--save-onnx in a read-only directory", "ro", "true",
         ["--steps=2", "--save-onnx=$D/trained.onnx"],
         ["trained.onnx", "Read-only file system"]),
        ("--metrics in a read-only directory", "ro", "true",
         ["--steps=2", "--metrics=$D/metrics.jsonl"],
         ["metrics.jsonl", "Read-only file system"]),
    ]
    failed = 0
    for i, (name, kind, prepare, flags, wanted) in enumerate(cases):
        d = os.path.join(work, f"case{i}")
        os.makedirs(d)
        if kind == "tmpfs":
            mount = (f"mount -t tmpfs -o size=16m tmpfs {d} && "
                     f"cp -a {before}/. {d}/")
        else:
            mount = (f"cp -a {before}/. {d}/ && mount --bind {d} {d} && "
                     f"mount -o remount,ro,bind {d}")
        command = " ".join(["'" + a.replace("$D", d) + "'" for a in
                            train + flags])
        # The run, then a copy of what it left (the mount vanishes with the
        # namespace).
        script = (f"set -e; D={d}; {mount}; {prepare}; "
                  f"set +e; {command} > {d}.out 2>&1; echo $? > {d}.rc; "
                  f"rm -f {d}/filler; mkdir -p {d}.left; "
                  f"cp -a {d}/. {d}.left/")
        rc, out = run(["unshare", "-m", "sh", "-c", script])
        if rc != 0:
            print(f"FAIL {name}: the set-up failed: {out}")
            failed += 1
            continue
        code = int(open(d + ".rc").read())
        text = open(d + ".out").read()
        errors = [line for line in text.splitlines() if "error:" in line]
        left = snapshot(d + ".left")
        for k in [k for k in left if k.endswith(".tmp")]:
            del left[k]  # a failed write's temporary file is not required gone
        problems = []
        if code == 0 or code >= 128:
            problems.append(f"exit {code}")
        if len(errors) != 1 or not all(w in errors[0] for w in wanted):
            problems.append(f"errors {errors}, wanted one naming {wanted}")
        changed = sorted(k for k in old if left.get(k) != old[k])
        if changed:
            problems.append(f"previous files changed or lost: {changed}")
        if problems:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(problems) + "\n" + text[-1500:])
        else:
            print(f"PASS {name}: {errors[0].strip()}")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
