"""Compile times and a GPT-2-small training step, side by side in one run:

1. Compile time of two-stage training pipelines (cpu:0,cpu:1, M = 4):
   torchvision's DenseNet-121 (batch 8, 224x224) and a GPT-2-small-size
   decoder (12 layers, d = 768, 12 heads, sequence 256, vocabulary 50257,
   tied LM head; about 124M parameters), each exported as users export
   (training mode, opset 17, dynamic batch); wall time of `gpipe-opt`,
   median over ROUNDS runs.
2. One training step of that GPT-2-small at batch 8, sequence 256, on this
   machine's cores: gpipe's two-stage pipeline (M = 4) and the plan
   `--plan=auto` picks for both cores, both compiled with a profile the
   script measures first (`gpipe-opt --calibrate`) and timed in process
   (`gpipe-bench train`), against PyTorch eager (the same module,
   float32, one batch of 8, forward + cross-entropy + backward + SGD step,
   timed in process, as many threads as cores); medians over the steps
   after warm-up.
3. Peak memory of that gpipe step (the process's maximum resident set)
   against the compiler's prediction (the sum of the stages' peak memory
   in gpipe-opt's stage table).

usage: bench/run_language_model_benchmarks.py [--build build]
       [--out docs/language-model-benchmarks.md] [--rounds 3] [--steps 3]
"""
import argparse
import datetime
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import language_models  # noqa: E402  (the GPT-2-style module)
import run_plan_benchmarks as plans_bench  # noqa: E402
from benchdoc import write_doc  # noqa: E402
from parameter_training import export  # noqa: E402

BATCH, SEQ, VOCAB, MICRO = 8, 256, 50257, 4


def gpt2_small():
    language_models.SEQ, language_models.VOCAB = SEQ, VOCAB
    torch.manual_seed(0)
    return language_models.GPT(triu=False, dim=768, heads=12, layers=12)


def densenet121():
    torch.manual_seed(0)
    return torchvision.models.densenet121(num_classes=1000)


def compile_pipeline(build, onnx_path, bundle, profile, best=False):
    """Returns (seconds, gpipe-opt's output): the two-stage pipeline, or
    with `best` the plan --plan=auto picks for both cores."""
    plan = (["--devices=cpu:0-1"] if best else
            [f"--micro-batches={MICRO}", "--devices=cpu:0,cpu:1"])
    start = time.perf_counter()
    proc = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx_path, "--mode=train",
         f"--batch-size={BATCH}", *plan, f"--device-profile={profile}",
         "--optimizer=sgd", "--lr=0.01", "-o", bundle],
        capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"gpipe-opt failed on {onnx_path}: {proc.stderr}")
    return seconds, proc.stdout + proc.stderr


def predicted_peak_mib(table):
    """The sum of the stage table's 'peak memory' column (MiB)."""
    total = 0.0
    for line in table.splitlines():
        m = re.match(r"^\d+\s+cpu:\d+\s.*\s([\d.]+) MiB$", line)
        if m:
            total += float(m.group(1))
    return total


def gpipe_step(build, bundle, steps):
    """Median step seconds and the child's peak resident set (MiB)."""
    proc = subprocess.run([os.path.join(build, "bin", "gpipe-bench"), "train",
                           bundle, str(steps)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gpipe-bench failed: {proc.stderr}")
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return float(re.search(r"median_s=([\d.e+-]+)", proc.stdout).group(1)), \
        rss_kib / 1024.0


def torch_step_worker(steps):
    threads = os.cpu_count()
    torch.set_num_threads(threads)
    model = gpt2_small().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randint(0, VOCAB, (BATCH, SEQ))
    y = torch.randint(0, VOCAB, (BATCH, SEQ))

    def step():
        opt.zero_grad()
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).backward()
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(f"median_s={statistics.median(times)}")


def torch_step(steps):
    env = dict(os.environ)
    threads = str(os.cpu_count())
    env.update(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
               MKL_NUM_THREADS=threads)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                           "--torch-worker", str(steps)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"PyTorch worker failed: {proc.stderr}")
    return float(re.search(r"median_s=([\d.e+-]+)", proc.stdout).group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(
        ROOT, "docs", "language-model-benchmarks.md"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--torch-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        return torch_step_worker(args.torch_worker)

    work = tempfile.mkdtemp(prefix="gpipe-lm-bench-")
    # Predictions from this machine's own profile, as users are told to.
    profile = os.path.join(work, "profile.json")
    subprocess.run(plans_bench.calibrate_command(args.build, profile),
                   capture_output=True, text=True, check=True)
    models = {
        "DenseNet-121, batch 8, 224x224": (
            densenet121, torch.randn(BATCH, 3, 224, 224)),
        "GPT-2-small size, batch 8, sequence 256": (
            gpt2_small, torch.randint(0, VOCAB, (BATCH, SEQ))),
    }
    compile_rows, outputs, bundles = [], {}, {}
    for i, (title, (make, example)) in enumerate(models.items()):
        onnx_path = os.path.join(work, f"model{i}.onnx")
        export(make(), example, onnx_path, dynamic=True)
        bundle = os.path.join(work, f"model{i}.gpipe")
        times = []
        for _ in range(args.rounds):
            seconds, outputs[title] = compile_pipeline(args.build, onnx_path,
                                                       bundle, profile)
            times.append(seconds)
            print(f"compile {title}: {seconds:.1f} s", flush=True)
        bundles[title] = bundle
        compile_rows.append((title, statistics.median(times), min(times),
                             max(times)))
    gpt = "GPT-2-small size, batch 8, sequence 256"
    # The pipeline first: the children's peak resident set is its.
    ours, rss = gpipe_step(args.build, bundles[gpt], args.steps)
    print(f"gpipe step {ours:.2f} s, peak RSS {rss:.0f} MiB", flush=True)
    best_bundle = os.path.join(work, "best.gpipe")
    _, best_output = compile_pipeline(
        args.build, os.path.join(work, "model1.onnx"), best_bundle, profile,
        best=True)
    best_plan = re.search(r"^plan: (.*?) \(", best_output, re.M)
    best, _ = gpipe_step(args.build, best_bundle, args.steps)
    print(f"gpipe best plan step {best:.2f} s", flush=True)
    theirs = torch_step(args.steps)
    print(f"PyTorch step {theirs:.2f} s", flush=True)
    predicted = predicted_peak_mib(outputs[gpt])

    def predicted_step(output):
        return float(re.search(r"predicted step ([\d.]+) ms",
                               output).group(1)) / 1e3

    lines = [
        "# Language-model benchmarks",
        "",
        "Produced by `bench/run_language_model_benchmarks.py` (one command, "
        "after `scripts/build.sh`).",
        "",
        f"- date: {datetime.date.today()}; machine: {platform.machine()}, "
        f"{os.cpu_count()} cores; PyTorch {torch.__version__}",
        "- models: torchvision's DenseNet-121 and a GPT-2-small-size decoder "
        "(`test/e2e/language_models.py`'s GPT at 12 layers, d = 768, 12 "
        "heads, sequence 256, vocabulary 50257, LM head tied to the token "
        "embedding: 124M parameters), exported in training mode (opset 17, "
        "dynamic batch).",
        "",
        "## Compile time",
        "",
        f"`gpipe-opt model.onnx --mode=train --batch-size={BATCH} "
        f"--micro-batches={MICRO} --devices=cpu:0,cpu:1 -o model.gpipe` "
        f"(import, partition, autodiff, schedule, native code for forward, "
        f"backward and optimizer of both stages, bundle written); wall "
        f"time over {args.rounds} runs.",
        "",
        "| model | median s | min s | max s |",
        "| --- | --- | --- | --- |",
    ]
    for title, median, low, high in compile_rows:
        lines.append(f"| {title} | {median:.1f} | {low:.1f} | {high:.1f} |")
    lines += [
        "",
        "## GPT-2-small training step",
        "",
        f"One SGD step at batch {BATCH}, sequence {SEQ} (cross-entropy over "
        f"every position). gpipe: the two-stage pipeline above (M = "
        f"{MICRO}) and the plan `--plan=auto` picks for both cores "
        f"(`--devices=cpu:0-1`), each compiled with a profile measured at "
        f"the start by `mpirun -np 2 gpipe-opt --calibrate`, `gpipe-bench "
        f"train`; PyTorch: eager, the same module, one batch of {BATCH}, "
        f"{os.cpu_count()} threads. Medians over {args.steps} steps after 2 "
        f"warm-up steps.",
        "",
        "| gpipe plan | gpipe s | predicted s | PyTorch s | gpipe / PyTorch |",
        "| --- | --- | --- | --- | --- |",
        f"| two stages, cpu:0,cpu:1, M = {MICRO} | {ours:.2f} | "
        f"{predicted_step(outputs[gpt]):.2f} | {theirs:.2f} | "
        f"{ours / theirs:.2f}x |",
        f"| auto's: `{best_plan.group(1) if best_plan else '?'}` | "
        f"{best:.2f} | {predicted_step(best_output):.2f} | {theirs:.2f} | "
        f"{best / theirs:.2f}x |",
        "",
        "## Peak memory",
        "",
        "The gpipe-bench process's maximum resident set against the sum of "
        "the stages' predicted peak memory (parameters, gradients, "
        "optimizer state, activations kept for backward, arenas, stage "
        "messages and the tied embedding's gradient exchange) in "
        "gpipe-opt's stage table.",
        "",
        "| predicted MiB | measured MiB | measured / predicted |",
        "| --- | --- | --- |",
        f"| {predicted:.0f} | {rss:.0f} | {rss / predicted:.3f} |",
        "",
        "gpipe-opt's stage table for the GPT:",
        "",
        "```",
    ]
    lines += [l for l in outputs[gpt].strip().splitlines()]
    lines += ["```", ""]
    write_doc(args.out, lines, echo=False)


if __name__ == "__main__":
    main()
