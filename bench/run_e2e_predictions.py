"""The cost model on the end-to-end suites' models: is the step predicted for
the plan `--plan=auto` picks within 15% of the step measured?

The models are those of the end-to-end tests (test/e2e/reference_models.py:
the MLP, the three small CNNs, ResNet-18 and the Transformer classifier;
the GPT of test/e2e/language_models.py), exported in training mode at a
batch of 32 (8 sequences of 64 tokens for the GPT). For each model and each
device set (one core, both cores, two MPI ranks of one core each) the plan
`gpipe-opt --emit=plans` marks the fastest is compiled and trained (as
bench/run_plan_benchmarks.py measures plans: the median of interleaved
rounds of gpipe-run medians after a warm-up run); the profile is measured
once by `mpirun -np 2 gpipe-opt --calibrate` at the start; no cost table. The table gives each prediction error and the
worst, and the machine's speed during each model's rounds against its
speed at the calibration (benchdoc.machine_speed).

usage: bench/run_e2e_predictions.py [--build build]
       [--out docs/e2e-predictions.md] [--rounds ROUNDS]
"""
import argparse
import datetime
import os
import platform
import re
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import language_models  # noqa: E402
import reference_models  # noqa: E402
import run_plan_benchmarks as plans_bench  # noqa: E402
from benchdoc import write_doc, work_dir  # noqa: E402

BATCH = 32
TARGET = 0.15


def reference(name):
    def make():
        model, x = reference_models.MODELS[name]()
        return model, (BATCH,) + tuple(x.shape[1:])
    return make


MODELS = {f"{name} (reference_models)": reference(name)
          for name in reference_models.MODELS}
# language_models.py's GPT at its own width and depth, batch 8 of 64 tokens.
MODELS["GPT 2x32 (language_models)"] = plans_bench.gpt(2, 32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=None,
                        help="the table's file (docs/e2e-predictions.md; "
                        "with --only, none unless given)")
    parser.add_argument("--only", action="append", default=[],
                        help="models whose name holds this text (repeat "
                        "for several); for a look at a few models")
    parser.add_argument("--profile", default=None,
                        help="a profile gpipe-opt --calibrate wrote, "
                        "instead of calibrating first")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the three plans of a model in turn; "
                        "a plan's step is the median of its rounds")
    args = parser.parse_args()
    if args.out is None and not args.only:
        args.out = os.path.join(ROOT, "docs", "e2e-predictions.md")
    work = work_dir("gpipe-e2e-predictions-")
    profile = args.profile or os.path.join(work, "profile.json")
    if not args.profile:
        subprocess.run(plans_bench.calibrate_command(args.build, profile),
                       capture_output=True, text=True, check=True)
    # The machine's speed when calibrated (right after it), and around
    # each model's rounds: a shared machine's phases move every step.
    calibrated = plans_bench.machine_speed(args.build)
    rows, worst = [], (1.0, "")
    for name, make in MODELS.items():
        if args.only and not any(o in name for o in args.only):
            continue
        onnx_path, npz, batch = plans_bench.export(name, make, work)
        autos = [next(p for p in plans_bench.plans(
            args.build, onnx_path, batch, devices, profile) if p[0])
            for devices in plans_bench.DEVICE_SETS]
        probes = []
        results = plans_bench.measure_plans(
            args.build, onnx_path, npz, batch, autos, profile, work,
            args.rounds, probes)
        speed = float(np.median(probes)) / calibrated
        for devices, auto, got in zip(plans_bench.DEVICE_SETS, autos,
                                      results):
            if got is None:
                raise SystemExit(f"{name} on {devices}: the plan failed")
            measured, predicted, spread = got
            ratio = predicted / measured
            plan = f"{auto[1]} M={auto[2]} {auto[3]}"
            print(f"{name} {devices}: {plan}: {measured:.2f} ms measured "
                  f"(rounds within {spread:.2f}x), {predicted:.2f} predicted "
                  f"({ratio:.2f}); machine at {speed:.2f}x its calibrated "
                  f"speed", flush=True)
            rows.append((name, devices, plan, measured, predicted, ratio,
                         speed))
            if abs(ratio - 1) > abs(worst[0] - 1):
                worst = (ratio, f"{name} on {devices}")
    within = sum(abs(r[5] - 1) <= TARGET for r in rows)
    lines = [
        "# Predictions on the end-to-end suites' models",
        "",
        f"Generated by `bench/run_e2e_predictions.py` on "
        f"{datetime.date.today()} ({platform.machine()}, {os.cpu_count()} "
        f"cores): the models of test/e2e/reference_models.py at a batch of "
        f"{BATCH} and language_models.py's GPT (8 sequences of 64 tokens), "
        f"exported in training mode; for each device set the plan "
        f"`--plan=auto` picks, compiled and trained "
        f"{plans_bench.STEPS} steps (as many as take "
        f"{plans_bench.RUN_SECONDS} s where a step is shorter) in each of "
        f"{args.rounds} rounds that "
        f"take the model's three plans in turn (the median of the rounds' "
        f"gpipe-run medians, after a warm-up run), beside its prediction; the profile measured once by "
        f"`mpirun -np 2 gpipe-opt --calibrate` (the link between two ranks "
        f"measured too), no cost table. The machine's speed: one core's "
        f"sgemm rate (`gpipe-bench matmul 256 1024 1024`) before each round "
        f"of the model, the median over the rounds against the rate right "
        f"after the calibration ({calibrated:.1f} GFLOP/s; with --profile, "
        f"at the start of the run): where it is "
        f"far from 1 the machine ran at another pace than the one its "
        f"profile describes, and the prediction is off by that much for "
        f"no fault of the model.",
        "",
        "| model | devices | auto's plan | measured (ms) | predicted (ms) "
        "| predicted / measured | machine speed |",
        "|---|---|---|---|---|---|---|",
        *[f"| {n} | {d} | {p} | {m:.2f} | {q:.2f} | {r:.2f} | {v:.2f} |"
          for n, d, p, m, q, r, v in rows],
        "",
        f"Within {TARGET:.0%}: {within} of {len(rows)}; worst: "
        f"{worst[0]:.2f} ({worst[1]}). Target: every case within "
        f"{TARGET:.0%}: **{'met' if within == len(rows) else 'not met'}**. "
        f"Machine speed during the models' rounds: "
        f"{min(r[6] for r in rows):.2f}x to {max(r[6] for r in rows):.2f}x "
        f"its calibrated speed.",
        "",
    ]
    print(lines[-2])
    if not args.out:
        return
    write_doc(args.out, lines, echo=False)


if __name__ == "__main__":
    main()
