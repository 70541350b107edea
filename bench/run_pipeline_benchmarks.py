"""Pipeline benchmark, side by side in one run on this machine:

1. Throughput: a deep MLP whose layers are all alike (so that two stages
   balance), trained with M=8 micro-batches on K=2 devices (cpu:0,cpu:1)
   against K=1 (cpu:0). Ideal speed-up with GPipe's bubble: 2*8/(8+1) =
   1.78x.
2. Recompute: a deep CNN on K=2, M=8, --recompute=always against never:
   the memory the stages allocate and the step time.
3. Prediction: the compiler's predicted step time against the measured
   one, with the roofline over the profile gpipe-opt --calibrate measured
   here, and with the per-op cost table that gpipe-run --profile-ops
   measured on a one-device bundle of the same model.
4. Schedules: the deep MLP with a LayerNorm first (balanced_mlp: its two
   stages equal in work) on K=2 (cpu:0,cpu:1) at M = 8 and 16 under
   gpipe, 1f1b, zb-h1 (the backward in two parts), interleaved-1f1b
   (--virtual-stages=2: four stages, two on each core in turns) and zb-v
   (four stages as a V, cpu:0,cpu:1,cpu:1,cpu:0, the backward in two
   parts), each with its
   measured and predicted step and bubble (calibrated profile, no cost
   table), beside the best one-stage plan on both cores (cpu:0-1, the whole
   batch); and the bubble the compiler predicts for K = 4 and 8 equal
   stages at M = 8..64 beside the papers' formulas (gpipe-schedule-bubbles).

Each configuration runs ROUNDS times, interleaved with the others; a run's
figure is gpipe-run's median step time over STEPS steps after a warm-up run;
the table gives medians over the rounds.

usage: bench/run_pipeline_benchmarks.py [--build build]
       [--out docs/pipeline-benchmarks.md] [--rounds 5]
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

from benchdoc import write_doc, work_dir

STEPS, BATCH, MICRO = 30, 256, 8
SCHEDULES = ("gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "zb-v")


def deep_mlp():
    layers = [nn.Flatten()]
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    layers.append(nn.Linear(1024, 10))
    return nn.Sequential(*layers), torch.randn(BATCH, 1024)


def balanced_mlp():
    """The deep MLP with a LayerNorm before its first product: the first
    stage's first product then has an input gradient to compute as every
    product of the second stage has (the deep MLP's first stage lacks it,
    about 7% of its work, which leaves its stages unequal by that much and
    no schedule can fill)."""
    layers = [nn.Flatten(), nn.LayerNorm(1024)]
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    layers.append(nn.Linear(1024, 10))
    return nn.Sequential(*layers), torch.randn(BATCH, 1024)


def deep_cnn():
    layers, c = [], 3
    for out in (32, 32, 64, 64, 64, 64):
        layers += [nn.Conv2d(c, out, 3, padding=1), nn.ReLU()]
        c = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)]
    return nn.Sequential(*layers), torch.randn(64, 3, 32, 32)


def export(build, work, name, make):
    model, x = make()
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, x, path, opset_version=17, input_names=["input"],
                      output_names=["logits"])
    rng = np.random.RandomState(0)
    data = os.path.join(work, name + ".npz")
    np.savez(data, input=rng.randn(x.shape[0] * 2, *x.shape[1:]).astype(
        np.float32), labels=rng.randint(0, 10, x.shape[0] * 2).astype(np.int64))
    return path, data, x.shape[0]


def compile_bundle(build, onnx_path, out, devices, batch, extra,
                   micro=MICRO, bubble=False):
    proc = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx_path, "--mode=train",
         f"--devices={devices}", f"--batch-size={batch}",
         f"--micro-batches={micro}", "--optimizer=sgd", "--lr=0.01",
         "-o", out] + extra, capture_output=True, text=True, check=True)
    found = re.search(r"predicted step ([0-9.]+) ms, bubble ([0-9.]+)%",
                      proc.stdout)
    if bubble:
        return float(found.group(1)), float(found.group(2))
    return float(found.group(1))


def train(build, bundle, data):
    proc = subprocess.run(
        [os.path.join(build, "bin", "gpipe-run"), bundle, "--train",
         f"--data={data}", f"--steps={STEPS}"], capture_output=True,
        text=True, check=True)
    step = float(re.search(r"step ([0-9.]+) ms measured", proc.stdout).group(1))
    allocated = sum(float(m) for m in re.findall(r"([0-9.]+) MiB allocated",
                                                 proc.stdout))
    found = re.search(r"bubble ([0-9.]+)% measured", proc.stdout)
    bubble = float(found.group(1)) if found else 0.0  # one stage: none
    # The stages' busy time a step: the idle share that is their imbalance,
    # (busiest - each) / (K x step), comes with any schedule.
    # Stages that share a device (interleaved) add up to the device's.
    busy = {}
    for device, b in re.findall(
            r"stage \d+ on (\S+): busy [0-9.]+% of the steps "
            r"\(([0-9.]+) ms a step", proc.stdout):
        busy[device] = busy.get(device, 0.0) + float(b)
    busy = list(busy.values())
    imbalance = (100 * sum(max(busy) - b for b in busy) / (len(busy) * step)
                 if len(busy) > 1 else 0.0)
    return step, allocated, bubble, imbalance


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--out",
                        default=os.path.join(root, "docs",
                                             "pipeline-benchmarks.md"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = work_dir("gpipe-pipeline-bench-")
    profile = os.path.join(work, "profile.json")
    cal = subprocess.run([os.path.join(args.build, "bin", "gpipe-opt"),
                          "--calibrate", "-o", profile],
                         capture_output=True, text=True, check=True)
    mlp, mlp_data, mlp_batch = export(args.build, work, "deep_mlp", deep_mlp)
    cnn, cnn_data, cnn_batch = export(args.build, work, "deep_cnn", deep_cnn)
    bal, bal_data, bal_batch = export(args.build, work, "balanced_mlp",
                                      balanced_mlp)
    configs = {
        "mlp K=1 cpu:0": (mlp, mlp_data, "cpu:0", mlp_batch, []),
        "mlp K=2 cpu:0,cpu:1": (mlp, mlp_data, "cpu:0,cpu:1", mlp_batch, []),
        "cnn K=2 never": (cnn, cnn_data, "cpu:0,cpu:1", cnn_batch,
                          ["--recompute=never"]),
        "cnn K=2 always": (cnn, cnn_data, "cpu:0,cpu:1", cnn_batch,
                           ["--recompute=always"]),
    }
    # Per-op times of each model, measured on one device.
    tables = {}
    for onnx_path, data, batch in ((mlp, mlp_data, mlp_batch),
                                   (cnn, cnn_data, cnn_batch)):
        bundle = os.path.join(work, "profile.gpipe")
        compile_bundle(args.build, onnx_path, bundle, "cpu:0", batch,
                       [f"--device-profile={profile}"])
        tables[onnx_path] = onnx_path + ".ops.csv"
        subprocess.run([os.path.join(args.build, "bin", "gpipe-run"), bundle,
                        "--train", f"--data={data}", "--steps=10",
                        f"--profile-ops={tables[onnx_path]}"],
                       capture_output=True, check=True)
    bundles, predicted, roofline = {}, {}, {}
    for name, (onnx_path, data, devices, batch, extra) in configs.items():
        bundles[name] = os.path.join(work, name.replace(" ", "_").replace(
            ",", "_").replace(":", "") + ".gpipe")
        roofline[name] = compile_bundle(
            args.build, onnx_path, bundles[name], devices, batch,
            extra + [f"--device-profile={profile}"])
        predicted[name] = compile_bundle(
            args.build, onnx_path, bundles[name], devices, batch,
            extra + [f"--device-profile={profile}",
                     f"--cost-table={tables[onnx_path]}"])
        train(args.build, bundles[name], data)  # warm-up
    # The schedules on the deep MLP, and the best one-stage plan on both
    # cores (calibrated profile, no cost table).
    schedules = {}
    for micro in (8, 16):
        for kind in SCHEDULES:
            virtual = (["--virtual-stages=2"]
                       if kind in ("interleaved-1f1b", "zb-v") else [])
            schedules[f"mlp M={micro} {kind}"] = (
                "cpu:0,cpu:1", micro, [f"--schedule={kind}"] + virtual)
    schedules["mlp one stage cpu:0-1 M=1"] = ("cpu:0-1", 1, [])
    sched_predicted = {}
    for name, (devices, micro, extra) in schedules.items():
        bundles[name] = os.path.join(work, name.replace(" ", "_").replace(
            "=", "").replace(",", "_").replace(":", "") + ".gpipe")
        sched_predicted[name] = compile_bundle(
            args.build, bal, bundles[name], devices, bal_batch,
            extra + [f"--device-profile={profile}"], micro=micro, bubble=True)
        train(args.build, bundles[name], bal_data)  # warm-up
    runs_of = {name: data for name, (_, data, *_r) in configs.items()}
    runs_of.update({name: bal_data for name in schedules})
    results = {name: [] for name in runs_of}
    for _ in range(args.rounds):
        for name, data in runs_of.items():
            results[name].append(train(args.build, bundles[name], data))
    med = {name: tuple(statistics.median(r[i] for r in runs) for i in range(4))
           for name, runs in results.items()}
    bubbles = subprocess.run(
        [os.path.join(args.build, "bin", "gpipe-schedule-bubbles"), "4", "8"],
        capture_output=True, text=True, check=True).stdout.strip().split("\n")

    # The calibration's summary (and its warning, where the machine's pace
    # moved), not its per-family lines.
    calibrated = " ".join(
        line for line in cal.stderr.strip().split("\n")
        if "one core: sgemm" in line or "warning" in line)
    one, two = med["mlp K=1 cpu:0"], med["mlp K=2 cpu:0,cpu:1"]
    speedup = one[0] / two[0]
    never, always = med["cnn K=2 never"], med["cnn K=2 always"]
    lines = [
        "# Pipeline benchmarks",
        "",
        f"Generated by `bench/run_pipeline_benchmarks.py` on "
        f"{datetime.date.today()} ({platform.machine()}, "
        f"{os.cpu_count()} cores): {args.rounds} interleaved rounds, each "
        f"figure gpipe-run's median step over {STEPS} steps, medians over the "
        f"rounds. Calibrated profile: `{calibrated}`.",
        "",
        f"## Throughput: deep MLP (8 x Linear 1024 + ReLU), batch {BATCH}, "
        f"M={MICRO}",
        "",
        "| devices | step (ms) | samples/s | bubble measured | predicted step (ms) |",
        "|---|---|---|---|---|",
    ]
    for name, m in (("mlp K=1 cpu:0", one), ("mlp K=2 cpu:0,cpu:1", two)):
        lines.append(f"| {name.split(' ', 1)[1]} | {m[0]:.2f} | "
                     f"{BATCH / m[0] * 1e3:.0f} | {m[2]:.1f}% | "
                     f"{predicted[name]:.2f} |")
    lines += [
        "",
        f"K=2 against K=1: **{speedup:.2f}x** the throughput (ideal with "
        f"the fill-drain bubble: {2 * MICRO / (MICRO + 1):.2f}x).",
        "",
        f"## Recompute: deep CNN (6 conv 3x3 + ReLU), batch {cnn_batch}, "
        f"K=2, M={MICRO}",
        "",
        "| recompute | step (ms) | memory allocated by the stages (MiB) | predicted step (ms) |",
        "|---|---|---|---|",
        f"| never | {never[0]:.2f} | {never[1]:.1f} | "
        f"{predicted['cnn K=2 never']:.2f} |",
        f"| always | {always[0]:.2f} | {always[1]:.1f} | "
        f"{predicted['cnn K=2 always']:.2f} |",
        "",
        f"Recompute keeps {100 * (1 - always[1] / never[1]):.0f}% less "
        f"memory for {100 * (always[0] / never[0] - 1):.0f}% more time per "
        f"step.",
        "",
        "## Prediction against measurement",
        "",
        "Predicted with the cost table of `gpipe-run --profile-ops` (one "
        "device, 10 steps) and, for comparison, with the roofline over the "
        "calibrated profile alone:",
        "",
        "| configuration | measured (ms) | predicted, cost table (ms) | error | predicted, roofline (ms) | error |",
        "|---|---|---|---|---|---|",
    ]
    for name in configs:
        err = predicted[name] / med[name][0] - 1
        rerr = roofline[name] / med[name][0] - 1
        lines.append(f"| {name} | {med[name][0]:.2f} | {predicted[name]:.2f} "
                     f"| {100 * err:+.0f}% | {roofline[name]:.2f} | "
                     f"{100 * rerr:+.0f}% |")
    best = med["mlp one stage cpu:0-1 M=1"][0]
    lines += [
        "",
        f"## Schedules: balanced deep MLP (a LayerNorm, then 8 x Linear 1024 "
        f"+ ReLU), batch {bal_batch}, K=2 (cpu:0,cpu:1)",
        "",
        "Calibrated profile, no cost table; the bubble measured is "
        "gpipe-run's (the stages' idle share of the step); beside them the "
        "best one-stage plan on both cores (cpu:0-1, the whole batch, "
        f"predicted {sched_predicted['mlp one stage cpu:0-1 M=1'][0]:.2f} ms): "
        f"{best:.2f} ms measured.",
        "",
        "| M | schedule | step (ms) | predicted (ms) | predicted / measured | bubble measured | of it, the stages' imbalance | bubble predicted | against one stage on both cores |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for micro in (8, 16):
        for kind in SCHEDULES:
            name = f"mlp M={micro} {kind}"
            step, _, bubble, imbalance = med[name]
            pstep, pbubble = sched_predicted[name]
            lines.append(f"| {micro} | {kind} | {step:.2f} | {pstep:.2f} | "
                         f"{pstep / step:.2f} | {bubble:.1f}% | "
                         f"{imbalance:.1f}% | {pbubble:.1f}% | "
                         f"{best / step:.2f}x |")
        zb, ofb = med[f"mlp M={micro} zb-h1"], med[f"mlp M={micro} 1f1b"]
        ratios.append((micro, zb[2] / ofb[2] if ofb[2] > 0 else float("nan"),
                       (zb[2] - zb[3]) / (ofb[2] - ofb[3])
                       if ofb[2] > ofb[3] else float("nan")))
    lines += [""] + [
        f"M={micro}: zb-h1's measured bubble is {100 * r:.0f}% of 1f1b's "
        f"(target: at most 40%); less the stages' imbalance, "
        f"{100 * own:.0f}%." for micro, r, own in ratios]
    lines += [
        "",
        "## Predicted bubble of equal stages",
        "",
        "Each schedule kind built and verified as the compiler builds it, "
        "played by its schedule simulator with K equal stages (F = B = W = "
        "1: a whole backward 2), beside the papers' formulas (GPipe and "
        "1F1B: (K-1)/(M+K-1); ZB-H1: (K-1)(F+B-W) idle per stage, "
        "(K-1)/(3M+K-1); interleaved 1F1B with v stages on each of K "
        "devices: Megatron-LM's (K-1)/(vM) of the ideal step, "
        "(K-1)/(vM+K-1) of the step; ZB-V, two stages on each device as a "
        "V, each half the device's model: the paper's (K-1)(F+B-2W) idle "
        "per device, none, counts the fill of a step's first forwards as "
        "overlapping the step before, which one step on its own keeps: "
        "(K-1)/(6M+K-1)); `gpipe-schedule-bubbles 4 8`:",
        "",
    ] + bubbles
    write_doc(args.out, lines + [""])


if __name__ == "__main__":
    main()
