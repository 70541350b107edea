"""Pipelines over MPI ranks: a bundle whose stages name ranks
(`--devices=r0:cpu:0,r1:cpu:1`) trains under `mpirun -np R gpipe-run`
exactly as the same bundle does with every stage in one process
(`--in-one-process`): the loss logs and the trained parameters
(`--save-params`, gathered to rank 0) are identical to the last bit (the
same schedule, the same arithmetic; only the transport differs).

Data parallelism (`--data-parallel=2`): two replicas of a one- or
two-stage pipeline, each training on its half of a global batch, equal to
one process training the same model on the whole global batch (the same
micro-batch size, twice the micro-batches) within 1e-5 relative on every
loss and every trained weight (only the order of the gradient sums
differs); ResNet-18 with BatchNorm included (batch statistics per
micro-batch, as in the reference), whose float32 training is chaotic: it
is judged against a float64 replay in PyTorch (CHAOTIC).

Cases: the MLP over two ranks (every schedule, recompute never and
always) and four ranks (`--oversubscribe`, two stages per core), the CNN and the
Transformer over two and four ranks; interleaved 1F1B with four stages on
two ranks (two stages per rank, in turns), the MLP and the CNN; ZB-V the
same (its stages 1 and 2 on rank 1). Then the rest: run without mpirun
(an error that says how to launch), the wrong process count (every rank
says so and exits non-zero), --eval-data, --profile-ops and --trace across
ranks, a bundle damaged on one rank, SIGKILL of one rank during training
(every rank gone within 30 s, non-zero, the dead rank named).

usage: mpi_pipeline.py GPIPE_OPT GPIPE_RUN WORK_DIR [ONLY,...]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

BATCH, SAMPLES, STEPS = 16, 48, 4
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe",
          "--mca", "btl", "self,vader,tcp"]
RANK_DEVICES = {2: "r0:cpu:0,r1:cpu:1",
                4: "r0:cpu:0,r1:cpu:1,r2:cpu:0,r3:cpu:1"}
OPTIMIZER = ["--optimizer=sgd", "--lr=0.05", "--momentum=0.9"]
# (model, ranks, schedule, recompute)
CASES = [("mlp", 2, s, r) for s in ("gpipe", "1f1b", "zb-h1")
         for r in ("never", "always")] + [
    ("mlp", 4, "1f1b", "always"), ("mlp", 4, "gpipe", "never"),
    ("mlp", 4, "zb-h1", "never"),
    ("cnn", 2, "1f1b", "never"), ("cnn", 4, "gpipe", "always"),
    ("cnn", 2, "zb-h1", "always"),
    ("transformer_no_dropout", 2, "gpipe", "always"),
    ("transformer_no_dropout", 4, "1f1b", "never"),
    ("mlp", 2, "interleaved-1f1b", "never"),
    ("mlp", 2, "interleaved-1f1b", "always"),
    ("cnn", 2, "interleaved-1f1b", "except-last"),
    ("mlp", 2, "zb-v", "never"), ("cnn", 2, "zb-v", "always")]
# (model, replicas, devices of one replica, schedule, optimizer, steps).
# Weights are compared for SGD only: Adam turns the rounding of a
# near-zero gradient into a full-size update of either sign.
DP_CASES = [
    ("mlp", 2, None, "gpipe", OPTIMIZER, STEPS),
    ("mlp", 2, "r0:cpu:0,r1:cpu:1", "zb-h1", OPTIMIZER, STEPS),
    ("cnn", 2, "r0:cpu:0,r1:cpu:1", "1f1b", ["--optimizer=adamw",
                                               "--lr=0.01"], STEPS),
    ("transformer_no_dropout", 2, "r0:cpu:0,r1:cpu:1", "gpipe",
     ["--optimizer=adam", "--lr=0.001"], STEPS),
    ("resnet18", 2, None, "gpipe", ["--optimizer=sgd", "--lr=0.005"], STEPS)]
# ResNet-18 on micro-batches of 4 is chaotic in float32 (BatchNorm over 4
# samples of a 1x1 map): the rounding of the gradient sums, which is all
# that differs between the replicas and one process, grows from 1e-7 of
# the loss at the second step to 1e-4 at the third and beyond on some
# CPUs (with lr 0 every step agrees to the bit). How far it grows depends
# on the CPU's kernels, so no fixed bound between the two float32 runs is
# a test of gpipe. Both runs are judged instead against a float64 replay
# in PyTorch (the same weights, data, global micro-batching and SGD), as
# docs/training.md judges chaotic training: each step no further from it
# than ten times PyTorch float32's own distance from it so far (PyTorch
# float32 follows the same float64 trajectory with rounding of the same
# kind and size, so a correct float32 implementation stays within a small
# multiple of it; a wrong gradient, a lost replica or a wrong slice of the
# batch is off by 1e-2 or more from the first update on), and never
# further than 1e-5 where PyTorch float32 is closer than 1e-6 (the first
# losses, before any rounding has been amplified).
# {model: the SGD learning rate of its DP_CASES entry}
CHAOTIC = {"resnet18": 0.005}


def run(cmd, timeout=300):
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


class Models:
    def __init__(self, gpipe_opt, work):
        self.opt, self.work, self.done = gpipe_opt, work, {}

    def bundle(self, name, ranks, schedule, recompute, micro=4):
        tag = f"{name}_r{ranks}_{schedule}_{recompute}"
        if name not in self.done:
            onnx_path = os.path.join(self.work, name + ".onnx")
            _, example = reference_models.export(name, onnx_path,
                                                 batch=BATCH // micro)
            rng = np.random.RandomState(5)
            data = os.path.join(self.work, name + ".npz")
            np.savez(data,
                     input=rng.randn(SAMPLES, *example.shape[1:]).astype(
                         np.float32),
                     labels=rng.randint(0, 10, size=SAMPLES).astype(np.int64))
            self.done[name] = (onnx_path, data)
        onnx_path, data = self.done[name]
        bundle = os.path.join(self.work, tag + ".gpipe")
        # Interleaved: each rank's device holds two stages, in turns.
        devices = RANK_DEVICES[ranks]
        if schedule == "interleaved-1f1b":
            devices = ",".join([devices] * 2)
        # ZB-V: the same, forth and back (the middle two on the last rank,
        # passing their messages in its process).
        if schedule == "zb-v":
            devices = ",".join(devices.split(",") +
                               devices.split(",")[::-1])
        rc, out = run([self.opt, onnx_path, "--mode=train",
                       f"--devices={devices}",
                       f"--batch-size={BATCH}", f"--micro-batches={micro}",
                       f"--schedule={schedule}", f"--recompute={recompute}",
                       "-o", bundle] + OPTIMIZER)
        if rc != 0:
            raise RuntimeError(f"compile failed: {out.strip()}")
        return tag, bundle, data


def read(path):
    with open(path) as f:
        return f.read()


def check_equal(models, gpipe_run, work, case):
    name, ranks, schedule, recompute = case
    tag, bundle, data = models.bundle(name, ranks, schedule, recompute)
    here, there = (os.path.join(work, tag + s) for s in ("_one.csv",
                                                         "_mpi.csv"))
    params_here, params_there = (os.path.join(work, tag + s)
                                 for s in ("_one_params", "_mpi_params"))
    rc, out = run([gpipe_run, bundle, "--train", f"--data={data}",
                   f"--steps={STEPS}", "--no-shuffle", f"--loss-log={here}",
                   f"--save-params={params_here}", "--in-one-process"])
    if rc != 0:
        return [f"one process failed: {out.strip()}"]
    rc, out = run(MPIRUN + ["-np", str(ranks), gpipe_run, bundle, "--train",
                            f"--data={data}", f"--steps={STEPS}",
                            "--no-shuffle", f"--loss-log={there}",
                            f"--save-params={params_there}"])
    if rc != 0:
        return [f"mpirun failed: {out.strip()}"]
    if f"on {ranks} ranks" not in out:
        return [f"the summary does not name the ranks: {out.strip()}"]
    if read(here) != read(there):
        return [f"loss logs differ:\n{read(here)}\nvs\n{read(there)}"]
    names = sorted(os.listdir(params_here))
    if not names or names != sorted(os.listdir(params_there)):
        return [f"parameters {names} vs {sorted(os.listdir(params_there))}"]
    for n in names:
        if not np.array_equal(np.load(os.path.join(params_here, n)),
                              np.load(os.path.join(params_there, n))):
            return [f"parameter {n[:-4]} differs"]
    print(f"{tag}: {ranks} ranks, {STEPS} losses and {len(names)} "
          f"parameters bit-identical to one process "
          f"({read(there).splitlines()[-1]})")
    return []


def check_data_parallel(models, gpipe_opt, gpipe_run, work, case):
    name, replicas, devices, schedule, optimizer, steps = case
    micro = 4
    models.bundle(name, 2, "gpipe", "never")  # exports the model and data
    onnx_path, data = models.done[name]
    tag = f"{name}_dp{replicas}" + (f"_{schedule}" if devices else "")
    stage_devices = devices.replace("r0:", "").replace("r1:", "") \
        if devices else None
    bundles = {}
    for kind, batch, flags in (
            ("dp", BATCH, [f"--data-parallel={replicas}"] +
             ([f"--devices={devices}"] if devices else [])),
            ("one", BATCH * replicas,
             [f"--devices={stage_devices}"] if stage_devices else [])):
        bundles[kind] = os.path.join(work, f"{tag}_{kind}.gpipe")
        rc, out = run([gpipe_opt, onnx_path, "--mode=train",
                       f"--batch-size={batch}",
                       f"--micro-batches={batch // micro}",
                       f"--schedule={schedule}", "-o", bundles[kind]] +
                      flags + optimizer)
        if rc != 0:
            return [f"compile ({kind}) failed: {out.strip()}"]
        if kind == "dp" and f"data parallel: {replicas} replicas" not in out:
            return [f"the report does not show the replicas: {out}"]
    ranks = replicas * (2 if devices else 1)
    logs = {k: os.path.join(work, f"{tag}_{k}.csv") for k in bundles}
    params = {k: os.path.join(work, f"{tag}_{k}_params") for k in bundles}
    common = [f"--data={data}", f"--steps={steps}", "--no-shuffle"]
    rc, out = run([gpipe_run, bundles["one"], "--train",
                   f"--loss-log={logs['one']}",
                   f"--save-params={params['one']}"] + common)
    if rc != 0:
        return [f"one process failed: {out.strip()}"]
    rc, out = run(MPIRUN + ["-np", str(ranks), gpipe_run, bundles["dp"],
                            "--train", f"--loss-log={logs['dp']}",
                            f"--save-params={params['dp']}"] + common)
    if rc != 0:
        return [f"mpirun failed: {out.strip()}"]
    one = np.loadtxt(logs["one"], delimiter=",", skiprows=1)[:, 1]
    dp = np.loadtxt(logs["dp"], delimiter=",", skiprows=1)[:, 1]
    if len(one) != steps or len(dp) != steps:
        return [f"{len(one)} and {len(dp)} losses logged, expected {steps}"]
    loss_err = float(np.max(np.abs(one - dp) / np.abs(one)))
    if name in CHAOTIC:
        return check_against_float64(name, tag, data, replicas, micro,
                                     {"one process": one, "replicas": dp})
    if loss_err > 1e-5:
        return [f"losses differ by {loss_err:.2e}: {one} vs {dp}"]
    # Trained weights (BatchNorm's running statistics follow another rule:
    # the mean of the replicas', docs/distributed.md).
    worst, count = 0.0, 0
    sgd = "--optimizer=sgd" in optimizer
    for n in sorted(os.listdir(params["one"])) if sgd else []:
        if "running_" in n:
            continue
        a = np.load(os.path.join(params["one"], n))
        b = np.load(os.path.join(params["dp"], n))
        scale = max(float(np.max(np.abs(a))), 1e-3)
        worst = max(worst, float(np.max(np.abs(a - b))) / scale)
        count += 1
    if (sgd and count == 0) or worst > 1e-5:
        return [f"{count} trained parameters, worst relative error {worst}"]
    print(f"{tag}: {replicas} replicas x {ranks // replicas} rank(s) vs one "
          f"process on the global batch of {BATCH * replicas}: worst loss "
          f"error {loss_err:.1e} over {steps} steps" +
          (f", worst weight error {worst:.1e} ({count} parameters)"
           if sgd else ""))
    return []


def check_against_float64(name, tag, data, replicas, micro, runs):
    """The chaotic cases (CHAOTIC): each run's losses against a float64
    replay, within ten times PyTorch float32's own drift from it."""
    import torch
    import pytorch_training
    arrays = np.load(data)
    x, y = torch.from_numpy(arrays["input"]), torch.from_numpy(arrays["labels"])
    batch = BATCH * replicas
    optimizers = {"sgd": (None, lambda params: torch.optim.SGD(
        params, lr=CHAOTIC[name]))}

    def replay(model, inputs):
        return pytorch_training.torch_run(
            model, inputs, y, batch // micro, "sgd", steps=STEPS, batch=batch,
            samples=SAMPLES, optimizers=optimizers)[0]

    model = reference_models.MODELS[name]()[0].train()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    want = replay(model, x)
    model.load_state_dict(start)
    exact = replay(model.double(), x.double())

    def relative(a, b):
        return [abs(p - q) / abs(q) for p, q in zip(a, b)]
    drift = relative(want, exact)
    print(f"{tag}: float64 replay, PyTorch float32 off by "
          + " ".join(f"{d:.1e}" for d in drift))
    errors = []
    for label, losses in runs.items():
        ours = relative(losses, exact)
        print(f"{tag}: {label} off by " + " ".join(f"{d:.1e}" for d in ours))
        for step, d in enumerate(ours):
            bound = max(1e-5, 10 * max(drift[:step + 1]))
            if d > bound:
                errors.append(f"{label}: step {step + 1} is {d:.1e} from "
                              f"float64, more than {bound:.1e} (ten times "
                              "PyTorch float32's drift, at least 1e-5)")
                break
    return errors


def rank_pids(proc):
    """{rank: pid} of the gpipe-run processes mpirun `proc` started."""
    pids = subprocess.run(["pgrep", "-f", "-P", str(proc.pid), "gpipe-run"],
                          capture_output=True, text=True).stdout.split()
    ranks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0")
                           if b"=" in e)
            ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(pid)
        except (OSError, KeyError, ValueError):
            pass
    return ranks


def committed_step(ck):
    try:
        with open(os.path.join(ck, "checkpoint.json")) as f:
            return json.load(f)["step"]
    except (OSError, ValueError, KeyError):
        return 0


def check_checkpoints(models, gpipe_opt, gpipe_run, work):
    """Checkpoints across ranks: SIGKILL of each rank in turn while every
    step writes a checkpoint, then --resume, gives the loss log and the
    parameters of an uninterrupted run to the bit; a checkpoint whose parts
    are of different steps is refused on every rank."""
    errors = []
    models.bundle("mlp", 2, "gpipe", "never")
    onnx_path, data = models.done["mlp"]
    bundle = os.path.join(work, "ck.gpipe")
    rc, out = run([gpipe_opt, onnx_path, "--mode=train",
                   "--devices=r0:cpu:0,r1:cpu:1", f"--batch-size={BATCH}",
                   "--micro-batches=4", "--optimizer=adam", "--lr=0.001",
                   "-o", bundle])
    if rc != 0:
        return [f"compile failed: {out.strip()}"]
    steps = 1500
    full, cut = (os.path.join(work, f"ck_{n}.csv") for n in ("full", "cut"))
    pfull, pcut = (os.path.join(work, f"ck_{n}_params")
                   for n in ("full", "cut"))
    ck = os.path.join(work, "ck_dir")
    shutil.rmtree(ck, ignore_errors=True)
    train = [gpipe_run, bundle, "--train", f"--data={data}",
             f"--steps={steps}", "--seed=3"]
    rc, out = run(MPIRUN + ["-np", "2"] + train + [f"--loss-log={full}",
                                                   f"--save-params={pfull}"])
    if rc != 0:
        return [f"uninterrupted run failed: {out.strip()}"]
    resume = train + [f"--checkpoint-dir={ck}", "--checkpoint-every=1",
                      f"--loss-log={cut}", "--resume"]
    rng = np.random.RandomState(11)
    kills = []
    for victim in (1, 0, 1):
        proc = subprocess.Popen(MPIRUN + ["-np", "2"] + resume,
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        # Kill a few hundred steps on, at a random moment of a step (most
        # of a step is its checkpoint's writing).
        target = committed_step(ck) + rng.randint(100, 300)
        deadline = time.time() + 60
        while committed_step(ck) < target and proc.poll() is None and \
                time.time() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.01))
        ranks = rank_pids(proc)
        if victim in ranks:
            os.kill(ranks[victim], signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return [f"kill rank {victim}: still running 30 s later"]
        kills.append(f"rank {victim} at step {committed_step(ck)}")
        if proc.returncode == 0:
            errors.append(f"the run killed at rank {victim} exited 0")
    rc, out = run(MPIRUN + ["-np", "2"] + resume + [f"--save-params={pcut}"])
    if rc != 0 or "resumed from" not in out:
        return errors + [f"final resume: rc {rc}: {out.strip()[-800:]}"]
    if read(full) != read(cut):
        return errors + ["loss logs differ after resuming"]
    for n in sorted(os.listdir(pfull)):
        if not np.array_equal(np.load(os.path.join(pfull, n)),
                              np.load(os.path.join(pcut, n))):
            return errors + [f"parameter {n[:-4]} differs after resuming"]
    parts = sorted(os.listdir(os.path.join(ck, "parts")))
    if parts != [f"step-{steps}.rank-0.bin", f"step-{steps}.rank-1.bin"]:
        errors.append(f"parts left: {parts}")
    print(f"checkpoint every step, SIGKILL of {', '.join(kills)}, then "
          f"--resume: {steps} losses and the parameters bit-identical to "
          f"an uninterrupted run")
    # A part of another step in place of rank 1's: refused on every rank.
    shutil.rmtree(ck)
    short = [a if not a.startswith("--steps=") else "--steps=3"
             for a in resume]
    run(MPIRUN + ["-np", "2"] + short)
    old = open(os.path.join(ck, "parts", "step-3.rank-1.bin"), "rb").read()
    run(MPIRUN + ["-np", "2"] + [a if not a.startswith("--steps=") else
                                 "--steps=5" for a in resume])
    with open(os.path.join(ck, "parts", "step-5.rank-1.bin"), "wb") as f:
        f.write(old)
    rc, out = run(MPIRUN + ["-np", "2"] + resume)
    if rc == 0 or "parts disagree" not in out or "rank 1" not in out:
        errors.append(f"mismatched parts: rc {rc}: {out.strip()[-800:]}")
    else:
        print("a checkpoint whose parts are of different steps: refused, "
              "naming rank 1's part")
    return errors


def check_failures(models, gpipe_run, work):
    errors = []
    _, bundle, data = models.bundle("mlp", 2, "gpipe", "never")
    rc, out = run([gpipe_run, bundle, "--train", f"--data={data}",
                   "--steps=1"])
    if rc == 0 or "launch it with mpirun -np 2" not in out:
        errors.append(f"without mpirun: rc {rc}: {out.strip()}")
    rc, out = run(MPIRUN + ["-np", "3", gpipe_run, bundle, "--train",
                            f"--data={data}", "--steps=1"])
    if rc == 0 or "but mpirun started 3 processes (use mpirun -np 2)" \
            not in out:
        errors.append(f"-np 3: rc {rc}: {out.strip()}")
    # --eval-data over four ranks: the accuracies of one process.
    _, four, _ = models.bundle("mlp", 4, "gpipe", "never")
    evaluate = ["--train", f"--data={data}", "--steps=6",
                f"--eval-data={data}"]
    rc1, one = run([gpipe_run, four, "--in-one-process"] + evaluate)
    rc, out = run(MPIRUN + ["-np", "4", gpipe_run, four] + evaluate)
    acc = [[l for l in o.splitlines() if "test accuracy" in l]
           for o in (one, out)]
    if rc != 0 or rc1 != 0 or not acc[0] or acc[0] != acc[1]:
        errors.append(f"--eval-data: rc {rc}: {acc[1]} vs {acc[0]}: "
                      f"{out.strip()[-300:]}")
    else:
        print(f"--eval-data over 4 ranks: {acc[1][-1].strip()}, as in one "
              f"process")
    # Ranks 0 and 2 (1 and 3) of that bundle pin the same core of this host.
    if "warning: ranks 0 and 2 on host " not in out or \
            "warning: ranks 1 and 3 on host " not in out:
        errors.append(f"no warning of ranks sharing cores: {out[-500:]}")
    # Each rank checks its own stages' cores on its own host: a core this
    # host lacks is named by the rank that would pin it.
    beyond = os.cpu_count() + 5
    far = os.path.join(work, "far.gpipe")
    rc, out = run([models.opt, models.done["mlp"][0], "--mode=train",
                   f"--devices=r0:cpu:0,r1:cpu:{beyond}",
                   f"--batch-size={BATCH}", "--micro-batches=4", "-o", far])
    rc, out = run(MPIRUN + ["-np", "2", gpipe_run, far, "--train",
                            f"--data={data}", "--steps=1"], timeout=60)
    if rc == 0 or "error: rank 1 (" not in out or \
            f"needs cpu:{beyond} but this host has" not in out:
        errors.append(f"cpu:{beyond} on rank 1: rc {rc}: {out.strip()}")
    else:
        print(f"cpu:{beyond} on rank 1: rank 1 says this host lacks it")
    # --profile-ops: rank 0 writes every rank's ops, as one process does.
    tables = [os.path.join(work, f"ops_{n}.csv") for n in ("one", "mpi")]
    run([gpipe_run, bundle, "--train", f"--data={data}", "--steps=3",
         f"--profile-ops={tables[0]}", "--in-one-process"])
    rc, out = run(MPIRUN + ["-np", "2", gpipe_run, bundle, "--train",
                            f"--data={data}", "--steps=3",
                            f"--profile-ops={tables[1]}"])
    try:
        ops = [sorted(l.split(",")[0] for l in read(t).splitlines()[1:])
               for t in tables]
        if rc != 0 or not ops[0] or ops[0] != ops[1]:
            raise ValueError(f"ops {ops[1]} vs {ops[0]}")
        print(f"--profile-ops across ranks: the {len(ops[0])} ops of one "
              f"process")
    except (OSError, ValueError) as e:
        errors.append(f"--profile-ops: rc {rc}: {e}: {out.strip()[-300:]}")
    # --trace: one file with both ranks' tracks on one clock (stage 1's
    # first forward after stage 0's first send).
    trace = os.path.join(work, "trace.json")
    rc, out = run(MPIRUN + ["-np", "2", gpipe_run, bundle, "--train",
                            f"--data={data}", "--steps=2",
                            f"--trace={trace}"])
    try:
        events = json.load(open(trace))
        events = events["traceEvents"] if isinstance(events, dict) \
            else events
        tracks = {e["tid"]: e["args"]["name"] for e in events
                  if e.get("ph") == "M" and e.get("name") == "thread_name"}
        first = {}
        for e in events:
            if e.get("ph") == "X":
                first.setdefault((tracks.get(e["tid"]), e["name"]), e["ts"])
        send = first[("stage 0 on rank 0 cpu:0", "send_activation 0")]
        forward = first[("stage 1 on rank 1 cpu:1", "forward 0")]
        if rc != 0 or forward < send:
            raise ValueError(f"forward 0 at {forward} before the send at "
                             f"{send}")
        # Every category crosses the ranks as it is (a generated loop is
        # no instruction, the runtime's parts are their own).
        categories = {e["cat"] for e in events if e.get("ph") == "X"}
        if not {"instruction", "kernel", "loop", "runtime"} <= categories:
            raise ValueError(f"categories {sorted(categories)}")
        print(f"--trace across ranks: tracks {sorted(tracks.values())}, "
              f"stage 1's first forward {forward - send:.0f} us after stage "
              f"0's first send")
    except (OSError, ValueError, KeyError) as e:
        errors.append(f"--trace: rc {rc}: {e}: {out.strip()[-500:]}")
    # A bundle damaged on rank 1 only (each rank its own copy): a clean
    # error naming rank 1, every rank gone.
    bad = os.path.join(work, "damaged.gpipe")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(bundle, bad)
    with open(os.path.join(bad, "stage1.params"), "r+b") as f:
        f.seek(8)
        byte = f.read(1)
        f.seek(8)
        f.write(bytes([byte[0] ^ 0xFF]))
    train = ["--train", f"--data={data}", "--steps=2"]
    start = time.time()
    rc, out = run(MPIRUN + ["-np", "1", gpipe_run, bundle] + train +
                  [":", "-np", "1", gpipe_run, bad] + train, timeout=60)
    if rc == 0 or "rank 1" not in out or "stage1.params" not in out:
        errors.append(f"damaged bundle on rank 1: rc {rc}: {out.strip()}")
    else:
        print(f"a bundle damaged on rank 1 only: every rank gone after "
              f"{time.time() - start:.1f} s, exit {rc}, rank 1 and "
              f"stage1.params named")
    # Each rank reads only its stages' arrays: the labels on rank 1 (the
    # last stage's), the inputs on rank 0; an array's error comes from the
    # rank that reads it, and int32 labels train as int64 ones do.
    arrays = dict(np.load(data))
    logs = []
    for name, change, rank, message in (
            ("labels", {"labels": arrays["labels"].astype(np.float32)}, 1,
             "array 'labels' is float32"),
            ("input", {"input": arrays["input"][..., :3]}, 0,
             "array 'input' is float32"),
            ("rows", {"labels": arrays["labels"][:-1]}, 1,
             f"rank 1's arrays have {SAMPLES - 1} rows, rank 0's "
             f"{SAMPLES}"),
            ("int32", {"labels": arrays["labels"].astype(np.int32)}, None,
             None),
            ("int64", {}, None, None)):
        path = os.path.join(work, f"data_{name}.npz")
        np.savez(path, **{**arrays, **change})
        log = os.path.join(work, f"data_{name}.csv")
        rc, out = run(MPIRUN + ["-np", "2", gpipe_run, bundle, "--train",
                                f"--data={path}", "--steps=3",
                                f"--loss-log={log}"], timeout=60)
        if rank is None:
            logs.append(read(log) if rc == 0 else out)
            continue
        if rc == 0 or f"error: rank {rank} (" not in out or \
                f"error: rank {1 - rank} (" in out or message not in out:
            errors.append(f"bad {name} in the data: rc {rc}: {out.strip()}")
        else:
            print(f"bad {name} in the data: only rank {rank} reads and "
                  f"names it")
    if len(logs) != 2 or logs[0] != logs[1]:
        errors.append(f"int32 labels: {logs}")

    # SIGKILL of each rank in turn, once training runs.
    for victim in (0, 1):
        proc = subprocess.Popen(
            MPIRUN + ["-np", "2", gpipe_run, bundle, "--train",
                      f"--data={data}", "--steps=1000000", "--no-shuffle"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "OMPI_MCA_orte_abort_on_non_zero_status": "1"})
        time.sleep(3)
        ranks = rank_pids(proc)
        pids = list(ranks.values())
        if victim not in ranks:
            proc.kill()
            proc.communicate()
            errors.append(f"kill rank {victim}: no such rank among {pids}")
            continue
        start = time.time()
        os.kill(ranks[victim], signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            errors.append(f"kill rank {victim}: the job still runs 30 s later")
            continue
        took = time.time() - start
        if proc.returncode == 0 or f"rank {victim}" not in out:
            errors.append(f"kill rank {victim}: rc {proc.returncode}: "
                          f"{out[-500:]}")
        else:
            print(f"SIGKILL of rank {victim}: every rank gone after "
                  f"{took:.1f} s, exit {proc.returncode}, rank {victim} named")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    if not shutil.which("mpirun"):
        print("SKIP: no mpirun (install openmpi-bin)")
        print("0 passed, 0 failed")
        return 0
    os.makedirs(work, exist_ok=True)
    models = Models(gpipe_opt, work)
    cases = [(f"{c[0]} {c[1]} ranks {c[2]} recompute={c[3]}",
              lambda c=c: check_equal(models, gpipe_run, work, c))
             for c in CASES]
    cases += [(f"{c[0]} data-parallel {c[1]}",
               lambda c=c: check_data_parallel(models, gpipe_opt, gpipe_run,
                                               work, c))
              for c in DP_CASES]
    cases.append(("checkpoints", lambda: check_checkpoints(
        models, gpipe_opt, gpipe_run, work)))
    cases.append(("failures", lambda: check_failures(models, gpipe_run,
                                                     work)))
    # ONLY: the cases whose label starts with one of these comma-separated
    # words (the sanitizer runs take a few).
    only = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    if only:
        cases = [c for c in cases if any(c[0].startswith(w) for w in only)]
    return reference_models.run_checks(cases, lambda check: check())


if __name__ == "__main__":
    sys.exit(main())
