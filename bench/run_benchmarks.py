"""Inference benchmark: gpipe bundles against PyTorch, side by side in one
run, with the same thread count, and gpipe's MLP against the oneDNN f32
matmul rate measured in the same run.

usage: bench/run_benchmarks.py [--build build] [--out docs/benchmarks.md]
       [--threads 1,2] [--quick]

Each number is the median of many runs after warm-up; ratios compare
medians taken in the same process setup (OMP_NUM_THREADS for gpipe's
oneDNN, torch.set_num_threads for PyTorch).
"""
import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import reference_models  # noqa: E402


def mlp4x1024():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers), torch.randn(256, 1024)


class TwoConvCnn(nn.Module):
    """Two convolutions with max pooling, then two linear layers: a small
    CNN for 28x28 grey images (docs/benchmarks.md's rows)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
            nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def fashion_cnn():
    torch.manual_seed(0)
    return TwoConvCnn(), torch.randn(64, 1, 28, 28)


def resnet18_b32():
    model, _ = reference_models.resnet18()
    return model, torch.randn(32, 3, 32, 32)


def transformer_b32():
    model, _ = reference_models.transformer()
    return model, torch.randn(32, 16, 64)


MODELS = {
    "MLP 4x1024, batch 256": (mlp4x1024, 4 * 2 * 256 * 1024 * 1024),
    "Two-convolution CNN (28x28), batch 64": (fashion_cnn, None),
    "ResNet-18 32x32, batch 32": (resnet18_b32, None),
    "TransformerEncoder 2x64, batch 32": (transformer_b32, None),
}


TRAIN_MODELS = {
    "MLP (test/e2e), batch 64": "mlp",
    "CNN (test/e2e), batch 64": "cnn",
    "ResNet-18 32x32 (test/e2e), batch 64": "resnet18",
    "TransformerEncoder 2x64, dropout 0.1 (test/e2e), batch 64": "transformer",
}


def torch_train_median(name, threads, iterations):
    """One SGD-momentum step of a reference model in PyTorch."""
    torch.set_num_threads(threads)
    model, x = getattr(reference_models, name)()
    x = torch.randn(64, *x.shape[1:])
    y = torch.randint(0, 10, (64,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    times = []
    for _ in range(max(3, iterations // 10)):
        step()
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_median(model, x, threads, iterations):
    torch.set_num_threads(threads)
    model.eval()
    times = []
    with torch.no_grad():
        for _ in range(max(3, iterations // 10)):
            model(x)
        for _ in range(iterations):
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def thread_env(threads):
    """Every thread pool PyTorch or oneDNN may use, limited to `threads`
    (OpenBLAS keeps its own pool, which torch.set_num_threads does not
    limit)."""
    n = str(threads)
    return dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n,
                MKL_NUM_THREADS=n)


def torch_median_subprocess(title, threads, iterations):
    """PyTorch timed in a fresh process whose thread pools are all sized
    `threads` from the start."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--torch-worker", title,
         str(threads), str(iterations)],
        env=thread_env(threads), check=True, capture_output=True,
        text=True).stdout
    return float(out.strip().splitlines()[-1])


def gpipe_median(bench, args, threads):
    out = subprocess.run([bench] + [str(a) for a in args],
                         env=thread_env(threads), check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().split("=")[1])


# The page's paragraphs that are not measured here: the other benchmark
# pages, and the GPU benchmark's section (bench/run_gpu_benchmarks.py).
OTHER_PAGES = """Language models (compile times of DenseNet-121 and a GPT-2-small-size
decoder, a GPT-2-small training step against PyTorch, peak memory against
the prediction): [language-model-benchmarks.md](language-model-benchmarks.md)
(`bench/run_language_model_benchmarks.py`).

Plans (every plan the search lists for 8 models on one core, both cores
and two MPI ranks, measured beside its prediction):
[plan-benchmarks.md](plan-benchmarks.md) (`bench/run_plan_benchmarks.py`);
the search's time for a simulated 8 x 8 cluster:
[cluster-plan-search.md](cluster-plan-search.md)
(`bench/run_cluster_search.py`); a stage on both cores run twenty times,
and beside a busy core: [stability-benchmarks.md](stability-benchmarks.md)
(`bench/run_stability_benchmark.py`).""".split("\n")

GPU_SECTION = """## GPU training step (not measured yet)

`bench/run_gpu_benchmarks.py` times a training step (SGD with momentum,
float32, TF32 off in both) of ResNet-18 and ResNet-50 (224x224, batch 64)
and a TransformerEncoder (4 layers of width 256, 8 heads, sequence 128,
batch 64) on `cuda:0`, gpipe (`gpipe-bench train`) against PyTorch eager on
the same GPU in one run, medians of 30 steps after warm-up, and writes the
table for this section. `scripts/gpu-check.sh all` (or `prepare` here and
`run bench` on the GPU machine, Transformer only) runs it. No GPU has been
available to this project yet: there are no numbers here, and the ratio to
PyTorch is unknown (docs/cuda.md).""".split("\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--torch-worker", nargs=3, metavar=("MODEL", "THREADS", "ITERATIONS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        title, t, n = args.torch_worker
        if title in TRAIN_MODELS:
            print(torch_train_median(TRAIN_MODELS[title], int(t), int(n)))
            return
        model, x = MODELS[title][0]()
        print(torch_median(model, x, int(t), int(n)))
        return
    threads = [int(t) for t in args.threads.split(",")]
    iterations = 10 if args.quick else 50
    work = os.path.join(args.build, "bench")
    os.makedirs(work, exist_ok=True)
    gpipe_opt = os.path.join(args.build, "bin", "gpipe-opt")
    bench = os.path.join(args.build, "bin", "gpipe-bench")

    rows = []
    for title, (build, flops) in MODELS.items():
        model, x = build()
        model.eval()
        key = title.split(",")[0].split(" (")[0].replace(" ", "_").lower()
        onnx_path = os.path.join(work, key + ".onnx")
        bundle = os.path.join(work, key + ".gpipe")
        torch.onnx.export(model, x, onnx_path, opset_version=17,
                          input_names=["input"], output_names=["output"],
                          do_constant_folding=False)
        subprocess.run([gpipe_opt, onnx_path, "-o", bundle], check=True)
        for t in threads:
            g = gpipe_median(bench, ["infer", bundle, iterations], t)
            p = torch_median_subprocess(title, t, iterations)
            rows.append((title, t, g, p, flops))
            print(f"{title}, {t} thread(s): gpipe {g * 1e3:.2f} ms, "
                  f"PyTorch {p * 1e3:.2f} ms", flush=True)

    train_rows = []
    for title, name in TRAIN_MODELS.items():
        onnx_path = os.path.join(work, name + "_train.onnx")
        bundle = os.path.join(work, name + "_train.gpipe")
        reference_models.export(name, onnx_path, batch=64)
        subprocess.run([gpipe_opt, onnx_path, "--mode=train", "--batch-size=64",
                        "--optimizer=sgd", "--lr=0.01", "--momentum=0.9",
                        "-o", bundle], check=True)
        for t in threads:
            g = gpipe_median(bench, ["train", bundle, iterations], t)
            p = torch_median_subprocess(title, t, iterations)
            train_rows.append((title, t, g, p))
            print(f"train {title}, {t} thread(s): gpipe {g * 1e3:.2f} ms, "
                  f"PyTorch {p * 1e3:.2f} ms", flush=True)

    matmul = {t: gpipe_median(bench, ["matmul", 256, 1024, 1024, iterations * 2], t)
              for t in threads}
    matmul_flops = 2 * 256 * 1024 * 1024

    lines = [
        "# Benchmarks",
        "",
        "Produced by `bench/run_benchmarks.py` (one command, after "
        "`scripts/build.sh`); every number is a median over "
        f"{iterations} runs after warm-up, gpipe and PyTorch side by side in "
        "the same run with the same thread count.",
        "",
        f"- date: {datetime.date.today()}; machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; PyTorch {torch.__version__}",
        "- gpipe: `gpipe-opt model.onnx -o model.gpipe` (inference bundle), "
        "timed in process by `gpipe-bench infer` (input copy-in and output "
        "copy-out included); threads: `OMP_NUM_THREADS`.",
        "- PyTorch: `model.eval()` under `torch.no_grad()`, in a process of "
        "its own per thread count with `torch.set_num_threads` and "
        "`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS` all set "
        "to it (Debian's PyTorch calls OpenBLAS, `libopenblas0-pthread`, for "
        "matrix products; its own thread pool ignores torch.set_num_threads).",
        "",
    ] + OTHER_PAGES + [
        "",
        "## Inference",
        "",
        "| model | threads | gpipe ms | PyTorch ms | PyTorch / gpipe |",
        "| --- | --- | --- | --- | --- |",
    ]
    for title, t, g, p, _ in rows:
        lines.append(f"| {title} | {t} | {g * 1e3:.2f} | {p * 1e3:.2f} | {p / g:.2f}x |")
    lines += [
        "",
        "## Training step",
        "",
        "One SGD-momentum step (forward, backward, update) on a batch of 64, "
        "cross-entropy loss; the models are those of `test/e2e/"
        "reference_models.py` (the Transformer with its dropout, drawn by "
        "each framework's own generator). gpipe: `--mode=train "
        "--batch-size=64` (M = 1, `--recompute=never`), timed by `gpipe-bench "
        "train`; PyTorch: `model.train()`, `zero_grad`, forward, "
        "`backward`, `SGD.step`.",
        "",
        "| model | threads | gpipe ms | PyTorch ms | PyTorch / gpipe |",
        "| --- | --- | --- | --- | --- |",
    ]
    for title, t, g, p in train_rows:
        lines.append(f"| {title} | {t} | {g * 1e3:.2f} | {p * 1e3:.2f} | {p / g:.2f}x |")
    lines += [
        "",
        "Each framework at its best thread setting of this run:",
        "",
        "| model | gpipe ms (threads) | PyTorch ms (threads) | PyTorch / gpipe |",
        "| --- | --- | --- | --- |",
    ]
    for title in TRAIN_MODELS:
        mine = [(g, t) for name, t, g, _ in train_rows if name == title]
        theirs = [(p, t) for name, t, _, p in train_rows if name == title]
        (g, gt), (p, pt) = min(mine), min(theirs)
        lines.append(f"| {title} | {g * 1e3:.2f} ({gt}) | {p * 1e3:.2f} ({pt}) "
                     f"| {p / g:.2f}x |")
    lines += [
        "",
        "## MLP against the oneDNN matmul ceiling",
        "",
        "The rate of one oneDNN f32 matmul 256x1024 by 1024x1024 measured in "
        "the same run is the ceiling for CPU kernels; the MLP's rate counts "
        "its four layers' matmul FLOPs (bias and ReLU are extra work).",
        "",
        "| threads | oneDNN matmul GFLOP/s | gpipe MLP 4x1024 GFLOP/s | fraction |",
        "| --- | --- | --- | --- |",
    ]
    for title, t, g, p, flops in rows:
        if flops:
            peak = matmul_flops / matmul[t] / 1e9
            rate = flops / g / 1e9
            lines.append(f"| {t} | {peak:.0f} | {rate:.0f} | {rate / peak:.0%} |")
    lines += [""] + GPU_SECTION
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
