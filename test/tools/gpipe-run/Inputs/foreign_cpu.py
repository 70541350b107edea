"""Compiles a model for a CPU with features this machine lacks and checks
that gpipe-run refuses the bundle at load, naming them, where running it
would die of an illegal instruction.

usage: foreign_cpu.py GPIPE_OPT GPIPE_RUN MODEL.onnx INPUT.npy WORKDIR

Of an Intel CPU with AMX (sapphirerapids) and an AMD one (znver4, SSE4a),
every x86-64 machine lacks the features of one: the first whose features
(its manifest's target_features) are not all in this machine's (gpipe-run
--list-devices) is compiled for. Prints gpipe-run's error line.
"""
import json
import os
import re
import subprocess
import sys

opt, run, model, x, work = sys.argv[1:6]
listing = subprocess.run([run, "--list-devices"], capture_output=True,
                         text=True, check=True).stdout
host = set(re.search(r"^CPU: .*; features (.*)$", listing, re.M)
           .group(1).split())
for cpu in ("sapphirerapids", "znver4"):
    bundle = os.path.join(work, cpu + ".gpipe")
    subprocess.run([opt, model, f"--target-cpu={cpu}", "-o", bundle],
                   check=True, capture_output=True)
    with open(os.path.join(bundle, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["target_cpu"] == cpu, manifest["target_cpu"]
    missing = [n for n in manifest["target_features"] if n not in host]
    if missing:
        break
else:
    sys.exit("this machine has every feature of sapphirerapids and znver4")
r = subprocess.run([run, bundle, "--infer", "--input", f"x={x}"],
                   capture_output=True, text=True)
assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
error = r.stderr.strip().splitlines()[-1]
assert "lacks: " + ", ".join(missing) + ";" in error, (missing, error)
assert "Illegal" not in r.stderr, r.stderr
print(error)
