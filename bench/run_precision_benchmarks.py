"""bfloat16 against float32 training steps, side by side in one run:
gpipe --precision=bf16 and --precision=fp32, PyTorch float32 and PyTorch
under torch.autocast("cpu", dtype=torch.bfloat16), on the same cores.

For each model (the 4x1024 MLP of bench/run_benchmarks.py at batch 256,
the 6-layer GPT of bench/run_language_model_benchmarks.py at batch 8 (and,
with `--models gpt2_small`, that benchmark's GPT-2-small),
torchvision's ResNet-18 on 32x32 images at batch 64, and the
TransformerEncoder of test/e2e at batch 64), exported as users export
(training mode, opset 17):

* gpipe: one stage on both cores (`--devices=cpu:0-1 --plan=given`, the
  whole batch) and the two-stage pipeline (`--devices=cpu:0,cpu:1
  --micro-batches=4`), each compiled in fp32 and bf16 and timed in process
  (`gpipe-bench train`, SGD), and the measured peak resident set of each;
* PyTorch eager, 2 threads pinned to both cores: float32 (the faster of
  OpenBLAS on 1 and on 2 threads) and autocast bf16 (its products run on
  oneDNN), the same module, forward + cross-entropy + backward + SGD step.

The rounds alternate fp32 and bf16 (ROUNDS of each, medians of their
medians): on a machine whose pace moves, a ratio from one round each
would measure the move.

usage: bench/run_precision_benchmarks.py [--build build]
       [--out docs/precision-benchmarks.md] [--steps 20] [--rounds 3]
       [--models mlp,gpt,...] [--device-profile profile.json]
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
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import reference_models  # noqa: E402
import run_language_model_benchmarks as lm_bench  # noqa: E402
from benchdoc import cpu_name, print_median_step, work_dir, write_doc  # noqa: E402,E501


def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    layers.append(nn.Linear(1024, 10))
    return nn.Sequential(*layers), torch.randn(256, 1024), 10


def gpt():
    model = lm_bench.gpt_6x384()
    return model, torch.randint(0, lm_bench.SMALL_VOCAB,
                                (lm_bench.BATCH, lm_bench.SMALL_SEQ)), \
        lm_bench.SMALL_VOCAB


def gpt2_small():
    model = lm_bench.gpt2_small()
    return model, torch.randint(0, lm_bench.VOCAB,
                                (lm_bench.BATCH, lm_bench.SEQ)), lm_bench.VOCAB


def resnet18():
    model, _ = reference_models.resnet18()
    return model, torch.randn(64, 3, 32, 32), 10


def transformer():
    model, _ = reference_models.transformer_no_dropout()
    return model, torch.randn(64, 16, 64), 10


MODELS = {
    "mlp": ("MLP 4x1024, batch 256", mlp),
    "gpt": (f"GPT 6x384 (sequence {lm_bench.SMALL_SEQ}, vocabulary "
            f"{lm_bench.SMALL_VOCAB}), batch {lm_bench.BATCH}", gpt),
    "resnet18": ("ResNet-18 32x32, batch 64", resnet18),
    "transformer": ("TransformerEncoder 2x64 (test/e2e), batch 64",
                    transformer),
    # Not in the default run (a float32 step takes 10-25 s here):
    # --models gpt2_small --rounds 1 --steps 3.
    "gpt2_small": (f"GPT-2-small (sequence {lm_bench.SEQ}, vocabulary "
                   f"{lm_bench.VOCAB}), batch {lm_bench.BATCH}", gpt2_small),
}
DEFAULT_MODELS = ["mlp", "gpt", "resnet18", "transformer"]
PLANS = {"one stage on both cores": ["--devices=cpu:0-1", "--plan=given"],
         "two stages, M = 4": ["--devices=cpu:0,cpu:1", "--micro-batches=4"]}


def torch_worker(name, steps, autocast):
    torch.set_num_threads(2)
    model, x, classes = MODELS[name][1]()
    model.train()
    y = torch.randint(0, classes,
                      x.shape[:2] if name.startswith("gpt") else x.shape[:1])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(x)
        out = out.float()
        F.cross_entropy(out.reshape(-1, classes), y.reshape(-1)).backward()
        opt.step()

    print_median_step(step, steps, warmup=3)


def torch_step(name, steps, autocast, blas_threads):
    env = dict(os.environ, OMP_NUM_THREADS="2",
               OPENBLAS_NUM_THREADS=str(blas_threads), MKL_NUM_THREADS="2")
    proc = subprocess.run(
        ["taskset", "-c", "0-1", sys.executable, os.path.abspath(__file__),
         "--torch-worker", name, str(steps), "1" if autocast else "0"],
        env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"PyTorch worker failed: {proc.stderr}")
    return float(re.search(r"median_s=([\d.e+-]+)", proc.stdout).group(1))


def compile_bundle(build, onnx_path, bundle, batch, plan, precision, profile):
    proc = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx_path, "--mode=train",
         f"--batch-size={batch}", *plan, f"--precision={precision}",
         "--optimizer=sgd", "--lr=0.01", "--momentum=0.9",
         f"--device-profile={profile}", "-o", bundle],
        capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gpipe-opt failed on {onnx_path}: {proc.stderr}")
    m = re.search(r"predicted step ([\d.]+) ms", proc.stdout)
    return float(m.group(1)) / 1e3 if m else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out",
                        default=os.path.join(ROOT, "docs",
                                             "precision-benchmarks.md"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--device-profile",
                        help="a profile of gpipe-opt --calibrate (default: "
                             "calibrate first)")
    parser.add_argument("--torch-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        name, steps, autocast = args.torch_worker
        torch_worker(name, int(steps), autocast == "1")
        return
    work = work_dir("gpipe-precision-")
    names = args.models.split(",")
    # The cost model's figures for this machine, the bfloat16 products'
    # included (gpipe-opt --calibrate), for the predicted columns.
    profile = args.device_profile
    if not profile:
        profile = os.path.join(work, "profile.json")
        print("calibrating: gpipe-opt --calibrate (about 5 minutes)",
              flush=True)
        subprocess.run([os.path.join(args.build, "bin", "gpipe-opt"),
                        "--calibrate", "-o", profile], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    for name in names:
        title, make = MODELS[name]
        model, x, _ = make()
        model.train()
        onnx_path = os.path.join(work, name + ".onnx")
        torch.onnx.export(model, x, onnx_path, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"],
                          output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"},
                                        "logits": {0: "batch"}})
        batch = x.shape[0]
        bundles, predicted = {}, {}
        for plan, flags in PLANS.items():
            for precision in ("fp32", "bf16"):
                bundle = os.path.join(
                    work, f"{name}_{plan.split()[0]}_{precision}.gpipe")
                predicted[plan, precision] = compile_bundle(
                    args.build, onnx_path, bundle, batch, flags, precision,
                    profile)
                bundles[plan, precision] = bundle
        times = {key: [] for key in bundles}
        peaks = {key: [] for key in bundles}
        torch_times = {"fp32": [], "bf16": []}
        for _ in range(args.rounds):
            for key, bundle in bundles.items():
                s, rss = lm_bench.gpipe_step(args.build, bundle, args.steps)
                times[key].append(s)
                peaks[key].append(rss)
            torch_times["fp32"].append(min(
                torch_step(name, args.steps, False, blas)
                for blas in (1, 2)))
            torch_times["bf16"].append(torch_step(name, args.steps, True, 1))
        med = {k: statistics.median(v) for k, v in times.items()}
        tmed = {k: statistics.median(v) for k, v in torch_times.items()}
        for plan in PLANS:
            f, b = med[plan, "fp32"], med[plan, "bf16"]
            rows.append((title, plan, f, b, max(peaks[plan, "fp32"]),
                         max(peaks[plan, "bf16"]), predicted[plan, "fp32"],
                         predicted[plan, "bf16"], tmed["fp32"], tmed["bf16"]))
            print(f"{title}, {plan}: gpipe fp32 {f * 1e3:.1f} ms, bf16 "
                  f"{b * 1e3:.1f} ms ({f / b:.2f}x); PyTorch fp32 "
                  f"{tmed['fp32'] * 1e3:.1f} ms, autocast bf16 "
                  f"{tmed['bf16'] * 1e3:.1f} ms", flush=True)

    lines = [
        "# Precision benchmarks: bfloat16 against float32 training",
        "",
        f"`bench/run_precision_benchmarks.py`, "
        f"{datetime.date.today().isoformat()}, {cpu_name()} "
        f"({os.cpu_count()} cores), {args.rounds} alternating rounds of "
        f"{args.steps} steps each, medians.",
        "",
        "gpipe: `gpipe-opt model.onnx --mode=train --precision=fp32|bf16` "
        "with the plan of the row, SGD with momentum, predicted with a "
        "profile of `gpipe-opt --calibrate` (the bfloat16 products' figures "
        "included), timed in process "
        "(`gpipe-bench train`); peak: the process's maximum resident set. "
        "PyTorch: eager, the same module, 2 threads pinned to both cores, "
        "float32 (the faster of OpenBLAS on 1 and 2 threads) and under "
        "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`.",
        "",
        "| model | plan | gpipe fp32 ms | gpipe bf16 ms | bf16 speed-up | "
        "peak fp32 / bf16 MiB | predicted fp32 / bf16 ms | PyTorch fp32 ms | "
        "PyTorch autocast bf16 ms | gpipe bf16's speed over autocast's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (title, plan, f, b, pf, pb, qf, qb, tf, tb) in rows:
        pred = (f"{qf * 1e3:.1f} / {qb * 1e3:.1f}" if qf and qb else "-")
        lines.append(
            f"| {title} | {plan} | {f * 1e3:.1f} | {b * 1e3:.1f} | "
            f"{f / b:.2f}x | {pf:.0f} / {pb:.0f} | {pred} | {tf * 1e3:.1f} | "
            f"{tb * 1e3:.1f} | {tb / b:.2f}x |")
    lines.append("")
    write_doc(args.out, lines)


if __name__ == "__main__":
    main()
