"""Pipelined inference against one stage, measured and predicted, side by
side in one run on this machine.

For each model (exported in eval mode, a static batch: the micro-batch
the bundle runs), three inference bundles: one stage on one core
(`--devices=cpu:0`), one stage on both cores (`cpu:0-1`) and a pipeline of
two stages (`cpu:0,cpu:1`, the cut gpipe-opt chooses). Each runs
CHUNKS micro-batches per call (`gpipe-bench infer BUNDLE N ROWS`, in
process: the median call of N after warm-up calls), in ROUNDS rounds that
take the bundles in turn. Predicted: gpipe-opt's pace of a micro-batch
(one stage: CHUNKS of them; a pipeline: the first through every stage,
the rest one interval, the slowest stage's, apart), with a profile of
`gpipe-opt --calibrate --precision=fp32` measured at the start, no cost
table. The machine's speed: one core's sgemm rate before each round
against the rate right after the calibration.

usage: bench/run_inference_benchmarks.py [--build build]
       [--out docs/inference-benchmarks.md] [--rounds 3] [--profile FILE]
       [--only NAME]
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import run_plan_benchmarks as plans  # noqa: E402
import language_models  # noqa: E402
from benchdoc import cpu_name, work_dir, write_doc  # noqa: E402

CHUNKS = 16
PLANS = ("cpu:0", "cpu:0-1", "cpu:0,cpu:1")


def deep_mlp():
    layers = [nn.Flatten()]
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    layers.append(nn.Linear(1024, 10))
    return nn.Sequential(*layers), (32, 1024)


def resnet18():
    model, (_, *rest) = plans.resnet18()
    return model, (16, *rest)


def encoder():
    model, (_, *rest) = plans.encoder()
    return model, (16, *rest)


def gpt():
    model, _ = plans.gpt(4, 256)()
    return model, (4, 64)


def demo_cnn():
    return plans.demo_cnn()


MODELS = {
    "deep MLP 8x1024": deep_mlp,
    "CNN (demo)": demo_cnn,
    "ResNet-18 32x32": resnet18,
    "TransformerEncoder 3x128": encoder,
    "GPT 4x256, seq 64": gpt,
}


def export(name, make, work):
    torch.manual_seed(0)
    model, shape = make()
    model.eval()
    tokens = len(shape) == 2 and "GPT" in name
    x = (torch.randint(0, language_models.VOCAB, shape) if tokens
         else torch.randn(shape))
    path = os.path.join(work, re.sub(r"\W+", "_", name) + ".onnx")
    torch.onnx.export(model, x, path, opset_version=17, input_names=["input"],
                      output_names=["output"])
    return path, shape[0]


def compile_bundle(build, onnx_path, devices, profile, bundle):
    """The bundle's predicted seconds for CHUNKS micro-batches."""
    out = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx_path, "--mode=infer",
         f"--devices={devices}", f"--device-profile={profile}", "-o", bundle],
        capture_output=True, text=True, check=True).stdout
    pipe = re.search(r"a micro-batch every ([\d.e+-]+) ms streaming .*, "
                     r"([\d.e+-]+) ms through all stages", out)
    if pipe:
        interval, latency = float(pipe.group(1)), float(pipe.group(2))
        return (latency + (CHUNKS - 1) * interval) / 1e3
    one = re.search(r"predicted: ([\d.e+-]+) ms a micro-batch of", out)
    return float(one.group(1)) * CHUNKS / 1e3


def measure(build, bundle, rows, iterations):
    out = subprocess.run(
        [os.path.join(build, "bin", "gpipe-bench"), "infer", bundle,
         str(iterations), str(rows)],
        capture_output=True, text=True, check=True).stdout
    return float(re.search(r"median_s=([\d.e+-]+)", out).group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(
        ROOT, "docs", "inference-benchmarks.md"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="a profile to use instead of "
                        "calibrating (its machine's pace is then unknown)")
    parser.add_argument("--only", action="append", help="a model's name")
    args = parser.parse_args()
    work = work_dir("gpipe-inference-bench-")
    profile = args.profile or os.path.join(work, "profile.json")
    calibrated = ""
    if not args.profile:
        cal = subprocess.run(
            [os.path.join(args.build, "bin", "gpipe-opt"), "--calibrate",
             "--precision=fp32", "-o", profile],
            capture_output=True, text=True, check=True)
        calibrated = " ".join(line for line in cal.stderr.split("\n")
                              if "one core: sgemm" in line)
    base_speed = statistics.median(plans.machine_speed(args.build)
                                   for _ in range(5))
    names = args.only or list(MODELS)
    rows_of, bundles, predicted = {}, {}, {}
    for name in names:
        onnx_path, micro = export(name, MODELS[name], work)
        rows_of[name] = micro * CHUNKS
        for devices in PLANS:
            key = (name, devices)
            bundles[key] = os.path.join(work, re.sub(
                r"\W+", "_", f"{name}_{devices}") + ".gpipe")
            predicted[key] = compile_bundle(args.build, onnx_path, devices,
                                            profile, bundles[key])
    # Calls per measurement: about a second's worth at the prediction.
    calls = {key: max(5, min(200, int(1.0 / max(p, 1e-4))))
             for key, p in predicted.items()}
    for key in bundles:
        measure(args.build, bundles[key], rows_of[key[0]], 3)  # warm-up
    runs = {key: [] for key in bundles}
    speeds = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            speeds[name].append(plans.machine_speed(args.build) / base_speed)
            for devices in PLANS:
                key = (name, devices)
                runs[key].append(measure(args.build, bundles[key],
                                         rows_of[name], calls[key]))
    lines = [
        "# Inference benchmarks: pipelined inference against one stage",
        "",
        f"Generated by `bench/run_inference_benchmarks.py` on "
        f"{datetime.date.today()} ({cpu_name()}, {os.cpu_count()} cores): "
        f"each model's bundles run {CHUNKS} micro-batches a call "
        f"(`gpipe-bench infer`, in process), the median call of about a "
        f"second's worth, the median of {args.rounds} rounds that take the "
        f"bundles in turn. Predicted: gpipe-opt's pace with a profile of "
        f"`gpipe-opt --calibrate --precision=fp32` ({calibrated or 'given'}), "
        f"no cost table. Machine speed: one core's sgemm before each round "
        f"against {base_speed:.1f} GFLOP/s right after the calibration.",
        "",
        "| model | micro-batch rows | plan | measured ms | rows/s | predicted ms | predicted / measured | against one stage on both cores | machine speed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        both = statistics.median(runs[(name, "cpu:0-1")])
        speed = statistics.median(speeds[name])
        for devices in PLANS:
            key = (name, devices)
            m = statistics.median(runs[key])
            plan = ("two stages " if "," in devices else "one stage ") + devices
            lines.append(
                f"| {name} | {rows_of[name] // CHUNKS} | {plan} | "
                f"{m * 1e3:.2f} | {rows_of[name] / m:.0f} | "
                f"{predicted[key] * 1e3:.2f} | {predicted[key] / m:.2f} | "
                f"{both / m:.2f}x | {speed:.2f} |")
    write_doc(args.out, lines + [""])


if __name__ == "__main__":
    main()
