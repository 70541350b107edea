"""Two builds of gpipe side by side in one run, for changes that must not
cost speed (a refactoring): every gpipe figure of bench/run_benchmarks.py
(gpipe-bench's inference and training step medians, the oneDNN matmul
rate) and of bench/run_pipeline_benchmarks.py (gpipe-run's measured step of
its four pipeline configurations). Each build compiles its own bundles from
the same ONNX exports; the two builds are measured alternately, figure by
figure, round by round (which build goes first alternates too), and each
figure is the median over the rounds.

Prints a table (and writes it to --out when given): BEFORE, AFTER and
AFTER / BEFORE per figure. Exits 1 if a figure of AFTER is slower than
BEFORE's by more than --tolerance (default 3%).

usage: bench/compare_builds.py BEFORE_BUILD AFTER_BUILD [--rounds 3]
       [--threads 1,2] [--iterations 30] [--tolerance 0.03] [--out FILE]
"""
import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import run_benchmarks as rb  # noqa: E402
import run_pipeline_benchmarks as rp  # noqa: E402
import reference_models  # noqa: E402  (test/e2e, on rb's path)
from benchdoc import work_dir  # noqa: E402
import torch  # noqa: E402


def compile_inference(build, onnx_path, bundle):
    subprocess.run([os.path.join(build, "bin", "gpipe-opt"), onnx_path,
                    "-o", bundle], check=True, capture_output=True)


def compile_training(build, onnx_path, bundle):
    subprocess.run([os.path.join(build, "bin", "gpipe-opt"), onnx_path,
                    "--mode=train", "--batch-size=64", "--optimizer=sgd",
                    "--lr=0.01", "--momentum=0.9", "-o", bundle],
                   check=True, capture_output=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--tolerance", type=float, default=0.03)
    parser.add_argument("--out")
    args = parser.parse_args()
    builds = {"before": os.path.abspath(args.before),
              "after": os.path.abspath(args.after)}
    threads = [int(t) for t in args.threads.split(",")]
    n = args.iterations
    work = work_dir("gpipe-compare-builds-")

    # figure name -> {side: function measuring it once (seconds)}
    figures = {}

    def bench(side):
        return os.path.join(builds[side], "bin", "gpipe-bench")

    for title, (make, _) in rb.MODELS.items():
        model, x = make()
        model.eval()
        key = title.split(",")[0].split(" (")[0].replace(" ", "_").lower()
        onnx_path = os.path.join(work, key + ".onnx")
        torch.onnx.export(model, x, onnx_path, opset_version=17,
                          input_names=["input"], output_names=["output"],
                          do_constant_folding=False)
        bundles = {}
        for side, build in builds.items():
            bundles[side] = os.path.join(work, f"{key}.{side}.gpipe")
            compile_inference(build, onnx_path, bundles[side])
        for t in threads:
            figures[f"infer {title}, {t} thread(s)"] = {
                side: (lambda s=side, t=t, b=bundles: rb.gpipe_median(
                    bench(s), ["infer", b[s], n], t))
                for side in builds}

    for title, name in rb.TRAIN_MODELS.items():
        onnx_path = os.path.join(work, name + "_train.onnx")
        reference_models.export(name, onnx_path, batch=64)
        bundles = {}
        for side, build in builds.items():
            bundles[side] = os.path.join(work, f"{name}_train.{side}.gpipe")
            compile_training(build, onnx_path, bundles[side])
        for t in threads:
            figures[f"train step {title}, {t} thread(s)"] = {
                side: (lambda s=side, t=t, b=bundles: rb.gpipe_median(
                    bench(s), ["train", b[s], n], t))
                for side in builds}

    for t in threads:
        figures[f"oneDNN matmul 256x1024x1024, {t} thread(s)"] = {
            side: (lambda s=side, t=t: rb.gpipe_median(
                bench(s), ["matmul", 256, 1024, 1024, 2 * n], t))
            for side in builds}

    mlp, mlp_data, mlp_batch = rp.export(None, work, "deep_mlp", rp.deep_mlp)
    cnn, cnn_data, cnn_batch = rp.export(None, work, "deep_cnn", rp.deep_cnn)
    configs = {
        "pipeline deep MLP K=1 cpu:0": (mlp, mlp_data, "cpu:0", mlp_batch, []),
        "pipeline deep MLP K=2 cpu:0,cpu:1": (mlp, mlp_data, "cpu:0,cpu:1",
                                              mlp_batch, []),
        "pipeline deep CNN K=2 recompute never": (
            cnn, cnn_data, "cpu:0,cpu:1", cnn_batch, ["--recompute=never"]),
        "pipeline deep CNN K=2 recompute always": (
            cnn, cnn_data, "cpu:0,cpu:1", cnn_batch, ["--recompute=always"]),
    }
    for name, (onnx_path, data, devices, batch, extra) in configs.items():
        bundles = {}
        for side, build in builds.items():
            key = name.replace(" ", "_").replace(",", "_").replace(":", "")
            bundles[side] = os.path.join(work, f"{key}.{side}.gpipe")
            rp.compile_bundle(build, onnx_path, bundles[side], devices, batch,
                              extra)
            rp.train(build, bundles[side], data)  # warm-up
        figures[name + " (gpipe-run step)"] = {
            side: (lambda s=side, b=bundles, d=data:
                   rp.train(builds[s], b[s], d)[0] / 1e3)
            for side in builds}

    results = {name: {side: [] for side in builds} for name in figures}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for name, measure in figures.items():
            for side in order:
                results[name][side].append(measure[side]())
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    lines = [
        "| figure | before (ms) | after (ms) | after / before |",
        "|---|---|---|---|",
    ]
    slower = []
    for name, runs in results.items():
        b = statistics.median(runs["before"])
        a = statistics.median(runs["after"])
        ratio = a / b
        if ratio > 1 + args.tolerance:
            slower.append(name)
        lines.append(f"| {name} | {b * 1e3:.3f} | {a * 1e3:.3f} | "
                     f"{ratio:.3f} |")
    header = (f"`bench/compare_builds.py {args.before} {args.after}` on "
              f"{datetime.date.today()} ({platform.machine()}, "
              f"{os.cpu_count()} cores): {args.rounds} alternating rounds, "
              f"medians; gpipe-bench figures are themselves medians over "
              f"{n} runs, pipeline figures gpipe-run's median step over "
              f"{rp.STEPS} steps.")
    text = ("# Two builds compared\n\n" + header + "\n\n" + "\n".join(lines) +
            "\n")
    verdict = (f"{len(slower)} figure(s) slower by more than "
               f"{args.tolerance:.0%}: {', '.join(slower)}" if slower else
               f"no figure slower by more than {args.tolerance:.0%}")
    text += "\n" + verdict + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    sys.exit(1 if slower else 0)


if __name__ == "__main__":
    main()
