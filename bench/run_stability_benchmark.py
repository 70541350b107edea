"""Does a stage on several cores run at a steady pace?

The main job's model (examples/fashion_mnist_cnn.py, batch 64, SGD with
momentum) compiled as one stage on both cores (`--devices=cpu:0-1`, the
whole batch at once) and trained RUNS times for STEPS steps on
Fashion-MNIST, nothing else running: each run's mean step (from the
run's --metrics file: the time from step 1's end to the last step's end,
over the steps between, so that start-up is not counted). Then the same
while a busy loop (a shell `while :; do :; done`) holds one core, first
core 1, then core 0; and PyTorch on the same model and cores (two
threads, OpenBLAS single-threaded: its best here), quiet and beside the
same busy loop, for the slow-down a user accepts from the framework.
The runs are interleaved (a quiet run each round, a busy one every other
round, core 1 and core 0 in turn; PyTorch quiet and busy in turn), so that
a machine whose pace moves over minutes moves the quiet median and the
busy runs alike; before each quiet run one core's sgemm rate is probed
(benchdoc.machine_speed), and the table gives how far the
machine's own pace moved over the quiet runs beside how far they did.

Targets (issue 28): the slowest quiet run within 1.3x of the quiet
median; with the busy loop, within 2.5x of the quiet median.

usage: bench/run_stability_benchmark.py [--build build]
       [--out docs/stability-benchmarks.md] [--runs 20] [--steps 150]
"""
import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchdoc import cpu_name, machine_speed, write_doc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"
PYTHON = "/usr/bin/python3"


@contextlib.contextmanager
def busy_core(core):
    """A busy loop pinned to `core` while the block runs (None: none)."""
    if core is None:
        yield
        return
    loop = subprocess.Popen(["taskset", "-c", str(core), "sh", "-c",
                             "while :; do :; done"])
    try:
        yield
    finally:
        loop.kill()
        loop.wait()


def gpipe_step(build, bundle, steps, work):
    metrics = os.path.join(work, "metrics.jsonl")
    subprocess.run([os.path.join(build, "bin", "gpipe-run"), bundle,
                    "--train", "--data", DATA, "--steps", str(steps),
                    "--metrics", metrics], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in open(metrics)]
    rows = [r for r in rows if "step" in r and "time_s" in r]
    return (rows[-1]["time_s"] - rows[0]["time_s"]) / (len(rows) - 1)


def torch_step(steps, work):
    """PyTorch's mean step on the same model and cores
    (bench/demo_torch_steps.py)."""
    out = os.path.join(work, "pytorch.json")
    subprocess.run([PYTHON, os.path.join(ROOT, "bench", "demo_torch_steps.py"),
                    str(steps), out], check=True, stdout=subprocess.DEVNULL)
    return json.load(open(out))["mean_s"]


def ms(seconds):
    return f"{1e3 * seconds:.2f}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out",
                        default=os.path.join(ROOT, "docs",
                                             "stability-benchmarks.md"))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy-runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    if os.cpu_count() < 2:
        sys.exit("needs two cores")
    if args.busy_runs < 1 or args.runs < 4 * args.busy_runs:
        sys.exit("--runs must be at least 4 x --busy-runs (>= 1): a busy "
                 "run every other round, core 1 and core 0 in turn")

    with tempfile.TemporaryDirectory() as work:
        onnx_path = os.path.join(work, "cnn.onnx")
        subprocess.run([PYTHON, os.path.join(ROOT, "examples",
                                             "fashion_mnist_cnn.py"),
                        "--output", onnx_path], check=True,
                       stdout=subprocess.DEVNULL)
        bundle = os.path.join(work, "one_stage.gpipe")
        subprocess.run([os.path.join(args.build, "bin", "gpipe-opt"),
                        onnx_path, "--mode=train", "--devices=cpu:0-1",
                        "--plan=given", "--batch-size=64", "--optimizer=sgd", "--lr=0.05",
                        "--momentum=0.9", "-o", bundle], check=True,
                       stdout=subprocess.DEVNULL)
        gpipe_step(args.build, bundle, 10, work)  # warm the file cache

        quiet, paces = [], []
        busy = {1: [], 0: []}
        for run in range(args.runs):
            paces.append(machine_speed(args.build))
            quiet.append(gpipe_step(args.build, bundle, args.steps, work))
            line = (f"round {run + 1}: sgemm {paces[-1]:.1f} GFLOP/s, "
                    f"quiet {ms(quiet[-1])} ms")
            core = 1 if run % 4 == 1 else 0
            if run % 2 == 1 and len(busy[core]) < args.busy_runs:
                with busy_core(core):
                    busy[core].append(gpipe_step(args.build, bundle,
                                                 args.steps, work))
                line += f", core {core} busy {ms(busy[core][-1])} ms"
            print(line, flush=True)
        torch_quiet, torch_busy = [], []
        for _ in range(3):
            torch_quiet.append(torch_step(args.steps, work))
            with busy_core(1):
                torch_busy.append(torch_step(args.steps, work))
        print(f"PyTorch quiet {', '.join(ms(t) for t in torch_quiet)}, "
              f"core 1 busy {', '.join(ms(t) for t in torch_busy)} ms")

    median = statistics.median(quiet)
    slowest = max(quiet)
    worst_busy = max(max(v) for v in busy.values() if v)
    torch_median = statistics.median(torch_quiet)
    lines = [
        "# Stability of a stage on several cores",
        "",
        "Generated by `bench/run_stability_benchmark.py` on "
        f"{datetime.date.today()} ({cpu_name()}, "
        f"{os.cpu_count()} cores). The main job's model "
        "(examples/fashion_mnist_cnn.py, batch 64, SGD with momentum) as "
        "one stage on both cores (`--devices=cpu:0-1`), trained "
        f"{args.steps} steps per run on Fashion-MNIST; a run's step is the "
        "mean over its steps after the first (from its `--metrics` "
        "file). Busy: a shell busy loop pinned to one core for the whole "
        "run. PyTorch: the same model, batch and optimizer, two threads, "
        "`OPENBLAS_NUM_THREADS=1`. The runs interleaved: a quiet run every "
        "round, a busy one every other round (core 1 and core 0 in turn), "
        "PyTorch quiet and busy in turn.",
        "",
        "| | runs | median ms | slowest ms | slowest / quiet median |",
        "|---|---|---|---|---|",
        f"| gpipe, quiet | {len(quiet)} | {ms(median)} | {ms(slowest)} | "
        f"{slowest / median:.2f}x |",
    ]
    for core, times in busy.items():
        if not times:
            continue
        lines.append(
            f"| gpipe, core {core} busy | {len(times)} | "
            f"{ms(statistics.median(times))} | {ms(max(times))} | "
            f"{max(times) / median:.2f}x |")
    lines += [
        f"| PyTorch, quiet | 3 | {ms(torch_median)} | {ms(max(torch_quiet))}"
        f" | {max(torch_quiet) / torch_median:.2f}x |",
        f"| PyTorch, core 1 busy | 3 | "
        f"{ms(statistics.median(torch_busy))} | {ms(max(torch_busy))} | "
        f"{max(torch_busy) / torch_median:.2f}x |",
        "",
        f"Quiet runs (ms): {', '.join(ms(t) for t in quiet)}.",
        "",
        f"The machine's pace before each quiet run (one core's sgemm, "
        f"GFLOP/s): {', '.join(f'{p:.0f}' for p in paces)}; its fastest "
        f"probe {max(paces) / min(paces):.2f}x its slowest, where the "
        f"quiet runs' slowest is {slowest / min(quiet):.2f}x their fastest.",
        "",
        "Targets: slowest quiet run within 1.3x of the median: "
        f"**{'met' if slowest <= 1.3 * median else 'not met'}** "
        f"({slowest / median:.2f}x); with a busy core within 2.5x of the "
        f"quiet median: **{'met' if worst_busy <= 2.5 * median else 'not met'}"
        f"** ({worst_busy / median:.2f}x).",
        "",
    ]
    write_doc(args.out, lines)


if __name__ == "__main__":
    main()
