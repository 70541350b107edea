"""Plans against measurement: does the plan gpipe-opt --plan=auto picks run
as fast as the fastest plan, and as fast as predicted?

For each model and each device set, every plan that `gpipe-opt
--emit=plans` lists (stages on groups of the cores, micro-batches dividing
the batch, GPipe and 1F1B, recompute where memory needs it) is compiled
with its flags, warmed up and then trained STEPS steps (more for a plan
whose warm-up step is short: as many as take RUN_SECONDS) in each of ROUNDS
rounds that take every plan of the device set in turn (a slow spell of a
noisy machine falls on all plans alike); the table gives each plan's
measured step (the median of its rounds' gpipe-run medians, in process)
beside its prediction, and per model: the plan auto picks, its measured step
against the fastest plan measured, and its prediction error. The profile
is measured once by `mpirun -np 2 gpipe-opt --calibrate` at the start (the
link between two ranks measured too); no cost table.

Device sets: one core (cpu:0), both cores (cpu:0-1, which the search
splits into stages itself) and two MPI ranks of one core each
(r0:cpu:0,r1:cpu:1, run under mpirun; the ranks name different cores, so
the search weighs no replicas there: a replica's stages would name
replica 0's cores).

usage: bench/run_plan_benchmarks.py [--build build]
       [--out docs/plan-benchmarks.md] [--only NAME] [--max-plans N]
       [--rounds ROUNDS]
"""
import argparse
import datetime
import math
import os
import platform
import re
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import language_models  # noqa: E402
from benchdoc import machine_speed, work_dir  # noqa: E402

STEPS = 20
# A run takes at least this long: a step of less than a millisecond (the
# README's MLP on both cores) ran at 0.38-0.47 ms as the median of 20 steps
# and at 0.29 as the median of 200, the first tens of steps slower; the
# prediction is the steady step.
RUN_SECONDS = 0.5


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10)), (64, 1, 28, 28)


def demo_cnn():
    from fashion_mnist_cnn import FashionMnistCnn
    return FashionMnistCnn(), (64, 1, 28, 28)


def resnet18():
    return torchvision.models.resnet18(num_classes=10), (32, 3, 32, 32)


def mobilenet_v2():
    return torchvision.models.mobilenet_v2(num_classes=10), (32, 3, 32, 32)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 3)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


def encoder():
    return Encoder(), (32, 32, 128)


def vit_small():
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=4, num_layers=4, num_heads=4,
        hidden_dim=128, mlp_dim=256, num_classes=10), (32, 3, 32, 32)


def gpt(layers, dim):
    def make():
        language_models.SEQ, language_models.VOCAB = 64, 512
        return language_models.GPT(triu=False, dim=dim, heads=4,
                                   layers=layers), (8, 64)
    return make


MODELS = {
    "MLP (README)": mlp,
    "CNN (demo)": demo_cnn,
    "ResNet-18 32x32": resnet18,
    "MobileNet V2 32x32": mobilenet_v2,
    "TransformerEncoder 3x128": encoder,
    "ViT-small 32x32": vit_small,
    "GPT 2x128, seq 64": gpt(2, 128),
    "GPT 4x256, seq 64": gpt(4, 256),
}


def export(name, make, work, batches=4):
    """The ONNX file and training data (`batches` batches) of a model
    (training mode); `make` returns the module and its input shape (a
    language model's [batch, sequence] of tokens below
    language_models.VOCAB, which its maker sets)."""
    torch.manual_seed(0)
    model, shape = make()
    model.train()
    tokens = len(shape) == 2
    vocab = language_models.VOCAB
    x = (torch.randint(0, vocab, shape) if tokens else torch.randn(shape))
    path = os.path.join(work, re.sub(r"\W+", "_", name) + ".onnx")
    torch.onnx.export(model, x, path, opset_version=17, input_names=["input"],
                      output_names=["output"], do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    rng = np.random.RandomState(0)
    rows = batches * shape[0]
    data = {"input": (rng.randint(0, vocab, (rows,) + shape[1:])
                      if tokens else
                      rng.randn(rows, *shape[1:]).astype(np.float32))}
    data["labels"] = (rng.randint(0, vocab, (rows,) + shape[1:]) if tokens
                      else rng.randint(0, 10, rows))
    npz = path[:-5] + ".npz"
    np.savez(npz, **data)
    return path, npz, shape[0]


PLAN = re.compile(r"^([*= ])\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\S+)\s+"
                  r"(\S+)\s+([\d.e+-]+)\s+\d+\s+[\d.]+%\s+(.*)$")
DEVICE_SETS = ("cpu:0", "cpu:0-1", "r0:cpu:0,r1:cpu:1")


def calibrate_command(build, profile):
    """gpipe-opt --calibrate as docs/pipeline.md has it for plans over
    ranks: under mpirun with two ranks (unbound, so that the kernel fits see
    every core), which measures the link between them too; the built-in
    10 GbE figures would price two ranks of one host as two hosts."""
    opt = [os.path.join(build, "bin", "gpipe-opt"), "--calibrate", "-o",
           profile]
    if shutil.which("mpirun"):
        return ["mpirun", "--allow-run-as-root", "--oversubscribe",
                "--bind-to", "none", "-np", "2"] + opt
    return opt


def plans(build, onnx_path, batch, devices, profile):
    """[(auto?, devices, M, schedule, recompute, predicted ms, fits)]."""
    out = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx_path,
         f"--devices={devices}", f"--batch-size={batch}", "--emit=plans",
         f"--device-profile={profile}"],
        capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = PLAN.match(line)
        if m:
            rows.append((m.group(1) == "*", m.group(4), int(m.group(5)),
                         m.group(6), m.group(7), float(m.group(8)),
                         "does not fit" not in m.group(9), int(m.group(3))))
    return rows


def compile_plan(build, onnx_path, npz, batch, plan, profile, bundle):
    """Compiles `plan` to `bundle`; the command that trains it and the
    bundle's predicted step."""
    _, devices, micro, schedule, recompute, _, _, replicas = plan
    out = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx_path, "--mode=train",
         f"--devices={devices}", f"--batch-size={batch // replicas}",
         f"--data-parallel={replicas}",
         f"--micro-batches={micro}", f"--schedule={schedule}",
         f"--recompute={recompute}", f"--device-profile={profile}",
         "-o", bundle], capture_output=True, text=True, check=True).stdout
    ranks = replicas * (1 + max([int(r) for r in
                                 re.findall(r"r(\d+):", devices)] or [0]))
    run = ([] if ranks == 1 else
           ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
            str(ranks)])
    run += [os.path.join(build, "bin", "gpipe-run"), bundle, "--train",
            f"--data={npz}", "--no-shuffle"]
    predicted = float(re.search(r"predicted step ([\d.]+) ms", out).group(1))
    return run, predicted


def steps_for(step_ms):
    """Steps of a run: STEPS, or as many as take RUN_SECONDS at `step_ms`
    (at most 5000)."""
    return max(STEPS, min(5000, math.ceil(RUN_SECONDS * 1e3 / step_ms)))


def median_step(run, steps=STEPS):
    """gpipe-run's median step (ms) over `steps` steps."""
    out = subprocess.run(run + [f"--steps={steps}"], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"step ([\d.]+) ms measured \(median of \d+ steps", out)
    return float(m.group(1))


def measure_plans(build, onnx_path, npz, batch, plans_, profile, work,
                  rounds, probes=None):
    """[(median step ms, predicted ms, slowest round / fastest)] of each
    plan: every plan compiled and warmed up (2 steps), then `rounds`
    rounds that each train every plan once, in turn, so that a slow
    spell of the machine falls on all plans alike; a plan's step is the
    median of its rounds' medians. A plan that does not compile or run
    is None (its error printed). With `probes` (a list), machine_speed()
    before every round is appended to it."""
    runs = []
    for i, plan in enumerate(plans_):
        try:
            run, predicted = compile_plan(build, onnx_path, npz, batch, plan,
                                          profile,
                                          os.path.join(work, f"plan{i}.gpipe"))
            warm = median_step(run, 2)
            runs.append((run, predicted, steps_for(warm)))
        except subprocess.CalledProcessError as e:
            print(f"{plan}: failed: {e.stderr}", file=sys.stderr)
            runs.append(None)
    times = [[] for _ in plans_]
    for _ in range(rounds):
        if probes is not None:
            probes.append(machine_speed(build))
        for i, r in enumerate(runs):
            if r is None:
                continue
            try:
                times[i].append(median_step(r[0], r[2]))
            except subprocess.CalledProcessError as e:
                print(f"{plans_[i]}: failed: {e.stderr}", file=sys.stderr)
    return [(float(np.median(t)), r[1], max(t) / min(t))
            if r is not None and t else None for r, t in zip(runs, times)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out",
                        default=os.path.join(ROOT, "docs", "plan-benchmarks.md"))
    parser.add_argument("--only", default="")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of every plan in turn; a plan's step "
                        "is the median of its rounds")
    parser.add_argument("--max-plans", type=int, default=1000)
    args = parser.parse_args()
    work = work_dir("gpipe-plans-")
    profile = os.path.join(work, "profile.json")
    calibrate = subprocess.run(
        calibrate_command(args.build, profile), capture_output=True,
        text=True, check=True).stderr
    # The reference pace: the median of five probes (one probe right after
    # the calibration once read 130 GFLOP/s between readings of 160).
    calibrated = float(np.median([machine_speed(args.build)
                                  for _ in range(5)]))
    lines = [
        "# Plan benchmarks",
        "",
        f"Generated by `bench/run_plan_benchmarks.py` on "
        f"{datetime.date.today()} ({platform.machine()}, {os.cpu_count()} "
        f"cores): every plan `gpipe-opt --emit=plans` lists, compiled and "
        f"trained {STEPS} steps (as many as take {RUN_SECONDS} s where a "
        f"step is shorter) in each of {args.rounds} rounds that take "
        f"the plans of a device set in turn (the median of the rounds' "
        f"gpipe-run medians, after a warm-up run), beside its prediction; "
        f"the profile measured once by "
        f"`mpirun -np 2 gpipe-opt --calibrate` (the link between two ranks "
        f"measured too), no cost table. Machine speed: one core's sgemm "
        f"rate (`gpipe-bench matmul 256 1024 1024`) before every round of a "
        f"device set, the median against the median of five probes right "
        f"after the calibration ({calibrated:.1f} GFLOP/s): a prediction is no "
        f"closer than the machine is to its calibrated pace.",
        "",
        "```",
        *[l for l in calibrate.splitlines() if "timed" not in l],
        "```",
        "",
        "| model | cores | plans | auto's plan | auto measured (ms) | fastest "
        "measured (ms) | auto / fastest | auto predicted / measured | worst "
        "predicted / measured | machine speed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    details = ["", "## Every plan", ""]
    for name, make in MODELS.items():
        if args.only and args.only not in name:
            continue
        onnx_path, npz, batch = export(name, make, work)
        for cores in DEVICE_SETS:
            rows = [p for p in plans(args.build, onnx_path, batch, cores,
                                     profile) if p[6]][:args.max_plans]
            measured, probes = [], []
            for plan, got in zip(rows, measure_plans(
                    args.build, onnx_path, npz, batch, rows, profile, work,
                    args.rounds, probes)):
                if got is None:
                    continue
                ms, predicted, spread = got
                measured.append((plan, ms, predicted))
                print(f"{name} {cores} {plan[1]} M={plan[2]} {plan[3]} "
                      f"{plan[4]}: {ms:.2f} ms measured (rounds within "
                      f"{spread:.2f}x), {predicted:.2f} predicted",
                      flush=True)
            if not measured:
                continue
            fastest = min(m[1] for m in measured)
            auto = next((m for m in measured if m[0][0]), measured[0])
            worst = max(measured, key=lambda m: abs(m[2] / m[1] - 1))
            lines.append(
                f"| {name} | {cores} | {len(measured)} | {auto[0][1]} M="
                f"{auto[0][2]} {auto[0][3]} | {auto[1]:.2f} | {fastest:.2f} | "
                f"{auto[1] / fastest:.2f}x | {auto[2] / auto[1]:.2f} | "
                f"{worst[2] / worst[1]:.2f} | "
                f"{float(np.median(probes)) / calibrated:.2f} |")
            details += [f"### {name}, {cores}", "",
                        "| devices | M | schedule | recompute | measured (ms) "
                        "| predicted (ms) |", "|---|---|---|---|---|---|"]
            details += [f"| {p[1]} | {p[2]} | {p[3]} | {p[4]} | {ms:.2f} | "
                        f"{pr:.2f} |" for p, ms, pr in measured]
            details.append("")
            # After each device set: a run cut short keeps what it measured.
            with open(args.out, "w") as f:
                f.write("\n".join(lines + details) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
