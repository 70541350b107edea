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
4. A 6-layer GPT (d = 384, 6 heads, sequence 128, vocabulary 4096, batch
   8): the plan `--plan=auto` picks for both cores and for one core
   (`--devices=cpu:0`), against PyTorch eager on the same cores (both
   cores: the faster of OpenBLAS on 2 threads and on 1 with 2 PyTorch
   threads; one core: 1 thread, OpenBLAS on 1), and each step's model
   FLOP/s (3 x the forward FLOPs the compiler counts) against oneDNN's
   float32 matmul on those cores (`gpipe-bench matmul 1024 1024 1024`).

5. With `--before-build DIR` (a build of an earlier commit: `git worktree
   add ../before COMMIT`, then its gpipe-opt, gpipe-run and gpipe-bench):
   auto's GPT-2-small plan compiled by both builds with the same flags,
   each step timed and broken down by part of the model (`--profile-ops`),
   with each process's peak resident set, side by side.

usage: bench/run_language_model_benchmarks.py [--build build]
       [--out docs/language-model-benchmarks.md] [--rounds 3] [--steps 3]
       [--before-build DIR]
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import language_models  # noqa: E402  (the GPT-2-style module)
import run_plan_benchmarks as plans_bench  # noqa: E402
from benchdoc import print_median_step, write_doc, work_dir  # noqa: E402
from parameter_training import export  # noqa: E402

BATCH, SEQ, VOCAB, MICRO = 8, 256, 50257, 4


def gpt2_small():
    language_models.SEQ, language_models.VOCAB = SEQ, VOCAB
    torch.manual_seed(0)
    return language_models.GPT(triu=False, dim=768, heads=12, layers=12)


SMALL_SEQ, SMALL_VOCAB = 128, 4096


def gpt_6x384():
    language_models.SEQ, language_models.VOCAB = SMALL_SEQ, SMALL_VOCAB
    torch.manual_seed(0)
    return language_models.GPT(triu=False, dim=384, heads=6, layers=6)


TORCH_MODELS = {"gpt2_small": (gpt2_small, SEQ, VOCAB),
                "gpt_6x384": (gpt_6x384, SMALL_SEQ, SMALL_VOCAB)}


def densenet121():
    torch.manual_seed(0)
    return torchvision.models.densenet121(num_classes=1000)


def compile_pipeline(build, onnx_path, bundle, profile, best=False,
                     devices="cpu:0-1"):
    """Returns (seconds, gpipe-opt's output): the two-stage pipeline, or
    with `best` the plan --plan=auto picks for `devices`."""
    plan = ([f"--devices={devices}"] if best else
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
    """Median step seconds and the gpipe-bench process's peak resident set
    (MiB, by /usr/bin/time: getrusage's RUSAGE_CHILDREN would give the
    largest of every child so far, gpipe-opt's and the calibration's
    included)."""
    proc = subprocess.run(["/usr/bin/time", "-f", "%M",
                           os.path.join(build, "bin", "gpipe-bench"), "train",
                           bundle, str(steps)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gpipe-bench failed: {proc.stderr}")
    rss_kib = int(proc.stderr.strip().splitlines()[-1])
    return float(re.search(r"median_s=([\d.e+-]+)", proc.stdout).group(1)), \
        rss_kib / 1024.0


def torch_step_worker(steps, name, threads):
    torch.set_num_threads(threads)
    make, seq, vocab = TORCH_MODELS[name]
    model = make().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randint(0, vocab, (BATCH, seq))
    y = torch.randint(0, vocab, (BATCH, seq))

    def step():
        opt.zero_grad()
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1)).backward()
        opt.step()

    print_median_step(step, steps, warmup=2)


def torch_step(steps, name="gpt2_small", threads=None, blas_threads=None):
    """PyTorch's median step: `threads` PyTorch threads (default: every
    core), OpenBLAS on `blas_threads` (default: as many), pinned to the
    first `threads` cores."""
    threads = threads or os.cpu_count()
    blas = str(blas_threads or threads)
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=blas,
               MKL_NUM_THREADS=blas)
    proc = subprocess.run(
        ["taskset", "-c", f"0-{threads - 1}", sys.executable,
         os.path.abspath(__file__), "--torch-worker", str(steps),
         "--torch-model", name, "--torch-threads", str(threads)],
        env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"PyTorch worker failed: {proc.stderr}")
    return float(re.search(r"median_s=([\d.e+-]+)", proc.stdout).group(1))


def step_breakdown(build, bundle, work, steps):
    """Where auto's GPT-2-small step goes: gpipe-run --profile-ops over
    `steps` steps of random tokens. Returns (measured ms, profiled ms,
    [(category, ms)], [(op, ms a step)] of the ten slowest ops)."""
    import numpy as np
    rng = np.random.default_rng(0)
    npz = os.path.join(work, "tokens.npz")
    np.savez(npz, input=rng.integers(0, VOCAB, (2 * BATCH, SEQ)),
             labels=rng.integers(0, VOCAB, (2 * BATCH, SEQ)))
    csv_path = os.path.join(work, "ops.csv")
    out = subprocess.run(
        [os.path.join(build, "bin", "gpipe-run"), bundle, "--train",
         f"--data={npz}", f"--steps={steps}", "--no-shuffle",
         f"--profile-ops={csv_path}"], capture_output=True, text=True,
        check=True).stdout
    measured = float(re.search(r"step ([\d.]+) ms measured", out).group(1))
    m = re.search(r"profiled step ([\d.]+) ms: (.*)", out)
    parts = [(p.rsplit(" ", 1)[0], float(p.rsplit(" ", 1)[1]))
             for p in m.group(2).split(", ")]
    ops = sorted(op_times(csv_path), key=lambda o: -o[1])
    return measured, float(m.group(1)), parts, ops[:10]


def op_times(csv_path):
    """[(ONNX node, ms a step, forward and backward)] of a --profile-ops
    table, the runtime's own rows left out."""
    ops = []
    with open(csv_path) as f:
        next(f)
        for line in f:
            op, fwd, bwd, rows = line.strip().rsplit(",", 3)
            if not op.startswith("(runtime)"):
                ops.append((op, (float(fwd) + float(bwd)) * 1e3 *
                            (BATCH // int(rows))))
    return ops


def model_parts(csv_path, runtime_parts):
    """A --profile-ops table summed by part of the GPT (ms a step): its
    ops by ONNX node name, then the runtime's own categories."""
    parts = {}
    for op, ms in op_times(csv_path):
        if "lm_head" in op:
            part = "the LM head's product"
        elif re.search(r"/(qkv|proj|fc|out)/MatMul$", op):
            part = "the layers' linear products (qkv, proj, fc, out)"
        elif re.search(r"blocks\.\d+/(MatMul|MatMul_1|Mul|Softmax|Where)$",
                       op):
            part = "attention (q k^T, scale, mask, softmax, weights v)"
        elif op == "(loss)":
            part = "the cross-entropy loss"
        elif "LayerNorm" in op:
            part = "layer norms"
        elif "Gather" in op:
            part = "embeddings"
        else:
            part = "other generated loops (GELU, residuals, split, " \
                   "transposes)"
        parts[part] = parts.get(part, 0.0) + ms
    for name in ("gradient sums", "optimizer step", "stage code between them",
                 "unattributed"):
        parts[name] = dict(runtime_parts).get(name, 0.0)
    return parts


def source_commit(build):
    """The commit a CMake build directory was configured from."""
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        source = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", f.read(),
                           re.M).group(1)
    return subprocess.run(["git", "-C", source, "rev-parse", "--short",
                           "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def before_after(args, onnx_path, plan_flags, profile, work):
    """Auto's GPT-2-small plan compiled and run by --before-build and by
    --build: per build (commit, step s, peak MiB, profiled ms, measured
    ms, parts)."""
    rows = []
    for tag, build in (("before", args.before_build), ("after", args.build)):
        bundle = os.path.join(work, f"gpt2-{tag}.gpipe")
        proc = subprocess.run(
            [os.path.join(build, "bin", "gpipe-opt"), onnx_path,
             "--mode=train", f"--batch-size={BATCH}", *plan_flags.split(),
             f"--device-profile={profile}", "--optimizer=sgd", "--lr=0.01",
             "-o", bundle], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"gpipe-opt of {build} failed: {proc.stderr}")
        tag_work = os.path.join(work, tag)
        os.makedirs(tag_work, exist_ok=True)
        measured, profiled, categories, _ = step_breakdown(
            build, bundle, tag_work, args.steps)
        step, peak = gpipe_step(build, bundle, args.steps)
        rows.append((source_commit(build), step, peak, profiled, measured,
                     model_parts(os.path.join(tag_work, "ops.csv"),
                                 categories)))
        print(f"{tag} ({rows[-1][0]}): step {step:.2f} s, peak "
              f"{rows[-1][2]:.0f} MiB", flush=True)
    return rows


def matmul_gflops(build, cores):
    """oneDNN's float32 matmul on `cores` cores (GFLOP/s; 1024^3, median
    of 30): the peak a step's model FLOP/s is read against."""
    env = dict(os.environ, OMP_NUM_THREADS=str(cores))
    out = subprocess.run(
        ["taskset", "-c", f"0-{cores - 1}",
         os.path.join(build, "bin", "gpipe-bench"), "matmul", "1024", "1024",
         "1024", "30"], env=env, capture_output=True, text=True,
        check=True).stdout
    seconds = float(re.search(r"median_s=([\d.e+-]+)", out).group(1))
    return 2 * 1024 ** 3 / seconds / 1e9


def forward_flops(output):
    """The forward FLOPs of one step: each stage's MFLOP per micro-batch
    times the micro-batches (gpipe-opt's stage table)."""
    m = re.search(r"in (\d+) micro-batch", output)
    micro = int(m.group(1)) if m else 1
    total = 0.0
    for line in output.splitlines():
        m = re.match(r"^\d+\s+(?:\d+\s+)?cpu:\S+\s+\[.*?\)\s+\d+\s+\d+\s+"
                     r"([\d.]+)\s", line)
        if m:
            total += float(m.group(1)) * 1e6
    return total * micro


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(
        ROOT, "docs", "language-model-benchmarks.md"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--before-build",
                        help="a build of an earlier commit to compare "
                        "auto's GPT-2-small step with, part by part")
    parser.add_argument("--torch-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--torch-model", default="gpt2_small",
                        help=argparse.SUPPRESS)
    parser.add_argument("--torch-threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        return torch_step_worker(args.torch_worker, args.torch_model,
                                 args.torch_threads or os.cpu_count())

    work = work_dir("gpipe-lm-bench-")
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
    breakdown = step_breakdown(args.build, best_bundle, work, args.steps)
    compared = before_after(
        args, os.path.join(work, "model1.onnx"), best_plan.group(1), profile,
        work) if args.before_build and best_plan else None
    theirs = torch_step(args.steps)
    print(f"PyTorch step {theirs:.2f} s", flush=True)
    predicted = predicted_peak_mib(outputs[gpt])

    def predicted_step(output):
        return float(re.search(r"predicted step ([\d.]+) ms",
                               output).group(1)) / 1e3

    peaks = {2: matmul_gflops(args.build, 2), 1: matmul_gflops(args.build, 1)}
    gpt2_rate = 3 * forward_flops(best_output) / best / 1e9
    # The 6-layer GPT: gpipe's best plan on both cores and on one, beside
    # PyTorch's best on the same cores.
    small_onnx = os.path.join(work, "gpt6.onnx")
    export(gpt_6x384(), torch.randint(0, SMALL_VOCAB, (BATCH, SMALL_SEQ)),
           small_onnx, dynamic=True)
    small_rows = []
    for devices, cores in (("cpu:0-1", 2), ("cpu:0", 1)):
        bundle = os.path.join(work, f"gpt6-{cores}.gpipe")
        _, out = compile_pipeline(args.build, small_onnx, bundle, profile,
                                  best=True, devices=devices)
        plan = re.search(r"^plan: (.*?) \(", out, re.M)
        step, _ = gpipe_step(args.build, bundle, args.steps)
        if cores == 2:
            theirs_small = min(torch_step(args.steps, "gpt_6x384", 2, 2),
                               torch_step(args.steps, "gpt_6x384", 2, 1))
        else:
            theirs_small = torch_step(args.steps, "gpt_6x384", 1, 1)
        rate = 3 * forward_flops(out) / step / 1e9
        print(f"6-layer GPT on {devices}: gpipe {step:.3f} s, PyTorch "
              f"{theirs_small:.3f} s", flush=True)
        small_rows.append((devices, plan.group(1) if plan else "?", step,
                           predicted_step(out), theirs_small, rate,
                           peaks[cores]))

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
        f"Auto's plan runs {gpt2_rate:.0f} GFLOP/s of model FLOPs (3 x the "
        f"forward FLOPs the compiler counts), {gpt2_rate / peaks[2]:.0%} of "
        f"oneDNN's float32 matmul on the two cores ({peaks[2]:.0f} GFLOP/s, "
        f"`gpipe-bench matmul 1024 1024 1024`, measured in this run).",
        "",
        "### Where auto's step goes",
        "",
        f"`gpipe-run --profile-ops` over {args.steps} steps of random tokens "
        f"(each kernel timed, so a step takes longer than above: "
        f"{breakdown[1]:.0f} ms profiled, {breakdown[0]:.0f} ms measured "
        f"in the same run); the categories sum to the profiled step.",
        "",
        "| part of the step | ms |",
        "| --- | --- |",
    ]
    lines += [f"| {name} | {ms:.1f} |" for name, ms in breakdown[2]]
    lines += [
        "",
        "The ten slowest ops (ONNX node names; forward and backward of a "
        "step; a fused attention is named by its Softmax):",
        "",
        "| op | ms a step |",
        "| --- | --- |",
    ]
    lines += [f"| `{op}` | {ms:.1f} |" for op, ms in breakdown[3]]
    if compared:
        (c0, s0, m0, p0, x0, parts0), (c1, s1, m1, p1, x1, parts1) = compared
        lines += [
            "",
            f"### Before and after: {c0} against {c1}",
            "",
            f"Auto's plan above compiled by the build of commit {c0} and "
            f"by this one ({c1}) with the same flags and profile, each run "
            f"as above (step: `gpipe-bench train`, median of {args.steps}; "
            f"peak: the process's maximum resident set; parts: "
            f"`--profile-ops`, ms a step).",
            "",
            f"| | {c0} | {c1} |",
            "| --- | --- | --- |",
            f"| step s | {s0:.2f} | {s1:.2f} |",
            f"| peak MiB | {m0:.0f} | {m1:.0f} |",
            f"| profiled step ms (measured in that run) | {p0:.0f} ({x0:.0f}) "
            f"| {p1:.0f} ({x1:.0f}) |",
        ]
        lines += [f"| {name} | {ms:.1f} | {parts1.get(name, 0.0):.1f} |"
                  for name, ms in sorted(parts0.items(),
                                         key=lambda p: -p[1])]
    lines += [
        "",
        "## A 6-layer GPT on two cores and on one",
        "",
        f"The same GPT at 6 layers, d = 384, 6 heads, sequence {SMALL_SEQ}, "
        f"vocabulary {SMALL_VOCAB}, batch {BATCH}: the plan `--plan=auto` "
        f"picks for the cores, beside PyTorch eager on the same cores (both "
        f"cores: the faster of OpenBLAS on 2 threads and on 1, with 2 "
        f"PyTorch threads; one core: 1 thread, OpenBLAS on 1), medians "
        f"over {args.steps} steps; model GFLOP/s against oneDNN's float32 "
        f"matmul on those cores.",
        "",
        "| cores | gpipe's plan | gpipe s | predicted s | PyTorch s | "
        "gpipe / PyTorch | model GFLOP/s | of matmul peak |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for devices, plan, step, pred, theirs_small, rate, peak in small_rows:
        lines.append(
            f"| {devices} | `{plan}` | {step:.3f} | {pred:.3f} | "
            f"{theirs_small:.3f} | {step / theirs_small:.2f}x | {rate:.0f} | "
            f"{rate / peak:.0%} |")
    lines += [
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
