"""The plan search over MPI ranks and replicas.

A GPT (language_models.GPT, 2 layers, d 64, batch 32) weighed for a
simulated cluster of 8 hosts of 8 cores (`--devices=r0:cpu:0-7,...,
r7:cpu:0-7`, a host profile written here, nothing run on it): the
candidates include data-parallel plans (replicas dividing the 8 ranks
and the batch, each replica's batch the step's over its replicas), and
pipelines over the ranks with each rank's cores in 1..8 stages;
`--plan=auto` compiles the fastest with its ranks, replicas and a
replica's batch (manifest.json), and compiling the flags the search prints
for it gives the same plan (the report says it is the fastest). Then two
ranks of this machine (`r0:cpu:0,r1:cpu:1`): no replicas (the ranks name
different cores, and a replica's stages name replica 0's cores), and the
plan auto picks trains under mpirun.

    cluster_plans.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import language_models  # noqa: E402

gpipe_opt, gpipe_run, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        failures.append(name)


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAIL {' '.join(args[:3])} ...: {proc.stdout}{proc.stderr}")
        sys.exit(1)
    return proc.stdout


BATCH = 32
torch.manual_seed(0)
model = language_models.GPT(triu=False, dim=64, heads=4, layers=2).train()
tokens = torch.randint(0, language_models.VOCAB, (BATCH, language_models.SEQ))
onnx_path = os.path.join(work, "gpt.onnx")
torch.onnx.export(model, tokens, onnx_path, opset_version=17,
                  input_names=["input"], output_names=["output"],
                  do_constant_folding=False,
                  training=torch.onnx.TrainingMode.TRAINING)

# A host of 8 cores (figures of a small server; no kernel fits: the
# roofline) and a 10 Gb/s network.
profile = os.path.join(work, "host8.json")
with open(profile, "w") as f:
    json.dump({"peak_gflops_per_core": 100, "memory_gbps_per_core": 20,
               "memory_gib": 64, "link_gbps": 50, "host_cores": 8,
               "host_gflops": 800, "host_memory_gbps": 100,
               "network_gbps": 1.25, "network_latency_us": 20}, f)
cluster = ",".join(f"r{r}:cpu:0-7" for r in range(8))
common = [f"--batch-size={BATCH}", "--optimizer=sgd", "--lr=0.1",
          f"--device-profile={profile}"]

PLAN = re.compile(r"^([*= ])\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)"
                  r"\s+([\d.e+-]+)\s")
text = run([gpipe_opt, onnx_path, f"--devices={cluster}", "--emit=plans"]
           + common)
plans = [PLAN.match(line) for line in text.splitlines()]
plans = [(m.group(1), int(m.group(2)), int(m.group(3)), m.group(4),
          int(m.group(5))) for m in plans if m]
check("plans weighed for the 8x8 cluster", len(plans) >= 100,
      f"{len(plans)} plans")
replicas = sorted({p[2] for p in plans})
check("replicas 1, 2, 4 and 8 weighed", replicas == [1, 2, 4, 8],
      str(replicas))
check("a replica's micro-batches divide its batch",
      all((BATCH // p[2]) % p[4] == 0 for p in plans))
check("pipelines over all 8 ranks",
      any(p[2] == 1 and "r7:" in p[3] for p in plans))
check("several stages per rank",
      any(p[1] == 16 and p[2] == 1 for p in plans))
check("one fastest plan", sum(p[0] == "*" for p in plans) == 1)

bundle = os.path.join(work, "auto.gpipe")
out = run([gpipe_opt, onnx_path, f"--devices={cluster}", "--plan=auto",
           "-o", bundle] + common)
chosen = re.search(r"^plan: (.*) \(([\d.e+-]+) ms a step predicted", out,
                   re.M)
check("--plan=auto names its plan", chosen is not None, out)
manifest = json.load(open(os.path.join(bundle, "manifest.json")))
training = manifest["training"]
flags = dict(f[2:].split("=", 1) for f in chosen.group(1).split())
d = int(flags.get("data-parallel", "1"))
check("the bundle has the plan's replicas",
      training.get("data_parallel", 1) == d,
      f"{training.get('data_parallel')} vs {d}")
check("the bundle takes a replica's batch",
      training["batch_size"] == BATCH // d,
      f"{training['batch_size']} vs {BATCH // d}")
check("the bundle has the plan's stages",
      len(manifest["stages"]) == len(flags["devices"].split(",")))
again = run([gpipe_opt, onnx_path, "-o", os.path.join(work, "given.gpipe"),
             "--optimizer=sgd", "--lr=0.1", f"--device-profile={profile}"]
            + ["--" + k + "=" + v for k, v in flags.items()
               if k != "batch-size"]
            + [f"--batch-size={flags.get('batch-size', BATCH)}"])
check("the printed flags compile the fastest plan",
      "this is the fastest of the" in again, again[-600:])

# Two ranks of this machine: no replicas; auto's plan trains.
text = run([gpipe_opt, onnx_path, "--devices=r0:cpu:0,r1:cpu:1",
            "--emit=plans"] + common)
local = [PLAN.match(line) for line in text.splitlines()]
local = [m for m in local if m]
check("two ranks naming different cores: no replicas",
      local and all(m.group(3) == "1" for m in local))
mpirun = shutil.which("mpirun")
if mpirun is None:
    print("SKIP: no mpirun")
else:
    bundle = os.path.join(work, "local.gpipe")
    run([gpipe_opt, onnx_path, "--devices=r0:cpu:0,r1:cpu:1", "--plan=auto",
         "-o", bundle] + common)
    data = os.path.join(work, "tokens.npz")
    rng = np.random.RandomState(0)
    np.savez(data, input=rng.randint(0, language_models.VOCAB,
                                     (2 * BATCH, language_models.SEQ)),
             labels=rng.randint(0, language_models.VOCAB,
                                (2 * BATCH, language_models.SEQ)))
    proc = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe",
                           "-np", "2", gpipe_run, bundle, "--train",
                           f"--data={data}", "--steps=4"],
                          capture_output=True, text=True, timeout=300)
    check("auto's plan on two ranks trains", proc.returncode == 0
          and "step 4/4" in proc.stdout, proc.stdout[-400:] + proc.stderr)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
