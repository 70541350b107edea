"""GPU benchmark: one training step (forward, backward, SGD with momentum)
of ResNet-18, ResNet-50 and a Transformer encoder on `cuda:0`, gpipe against
PyTorch eager on the same GPU, float32 with TF32 off in both, side by side
in one run. Each number is the median of many steps after warm-up, timed
inside the process (gpipe-bench train; PyTorch with torch.cuda.synchronize
around each step).

In two halves, as scripts/gpu-check.sh runs it (bundles are compiled
where gpipe-opt is, run where the GPU is):

  run_gpu_benchmarks.py prepare WORK [--gpipe-opt PATH] [--models a,b]
  run_gpu_benchmarks.py run WORK [--gpipe-bench PATH] [--markdown FILE]

`run` prints a table (and writes it as Markdown for docs/benchmarks.md)
with each model's step time in both and the ratio PyTorch / gpipe
(above 1: gpipe is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

BENCH_LR, BENCH_MOMENTUM = 0.01, 0.9


class TransformerClassifier(nn.Module):
    """A Transformer encoder over [batch, sequence, features] with a
    classification head on the mean of the sequence."""

    def __init__(self, features=256, heads=8, layers=4, classes=10):
        super().__init__()
        layer = nn.TransformerEncoderLayer(features, heads, 4 * features,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(features, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def resnet(depth):
    import torchvision
    return getattr(torchvision.models, f"resnet{depth}")(num_classes=1000)


# name -> (constructor, example input shape, classes)
MODELS = {
    "resnet18": (lambda: resnet(18), (64, 3, 224, 224), 1000),
    "resnet50": (lambda: resnet(50), (64, 3, 224, 224), 1000),
    "transformer": (TransformerClassifier, (64, 128, 256), 10),
}
TITLES = {
    "resnet18": "ResNet-18 224x224, batch 64",
    "resnet50": "ResNet-50 224x224, batch 64",
    "transformer": "TransformerEncoder 4x256 (8 heads, seq 128), batch 64",
}


def prepare(args):
    os.makedirs(args.work, exist_ok=True)
    done = []
    for name in args.models.split(","):
        make, shape, _ = MODELS[name]
        torch.manual_seed(0)
        model = make().train()
        path = os.path.join(args.work, name + ".onnx")
        torch.onnx.export(model, torch.randn(*shape), path, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"],
                          output_names=["logits"])
        bundle = os.path.join(args.work, name + ".gpipe")
        subprocess.run([args.gpipe_opt, path, "--mode=train", "--devices=cuda:0",
                        f"--batch-size={shape[0]}", "--micro-batches=1",
                        "--optimizer=sgd", f"--lr={BENCH_LR}",
                        f"--momentum={BENCH_MOMENTUM}", "-o", bundle],
                       check=True, stdout=subprocess.DEVNULL)
        os.remove(path)
        done.append(name)
        print(f"prepared {name}: {bundle}")
    with open(os.path.join(args.work, "models.json"), "w") as f:
        json.dump(done, f)


def torch_step_median(name, iterations):
    make, shape, classes = MODELS[name]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = make().cuda().train()
    x = torch.randn(*shape, device="cuda")
    y = torch.randint(0, classes, (shape[0],), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=BENCH_LR, momentum=BENCH_MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    for _ in range(max(3, iterations // 10)):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gpipe_step_median(bench, bundle, iterations):
    out = subprocess.run([bench, "train", bundle, str(iterations)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return float(out.stdout.split("median_s=")[1].split()[0])


def run(args):
    with open(os.path.join(args.work, "models.json")) as f:
        names = json.load(f)
    device = torch.cuda.get_device_name(0)
    rows, failed = [], 0
    for name in names:
        bundle = os.path.join(args.work, name + ".gpipe")
        p = torch_step_median(name, args.iterations)
        try:
            g = gpipe_step_median(args.gpipe_bench, bundle, args.iterations)
            rows.append((TITLES[name], f"{g * 1e3:.2f}", f"{p * 1e3:.2f}",
                         f"{p / g:.2f}x"))
        except RuntimeError as e:
            failed += 1
            rows.append((TITLES[name], f"failed: {e}", f"{p * 1e3:.2f}", "-"))
        print(" | ".join(rows[-1]), flush=True)
    table = ("| model (training step, SGD momentum, float32, TF32 off) | gpipe ms "
             "| PyTorch eager ms | PyTorch / gpipe |\n| --- | --- | --- | --- |\n"
             + "".join(f"| {' | '.join(r)} |\n" for r in rows))
    text = (f"On {device}, PyTorch {torch.__version__}; medians of "
            f"{args.iterations} steps after warm-up.\n\n" + table)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("phase", choices=("prepare", "run"))
    parser.add_argument("work")
    parser.add_argument("--gpipe-opt", default="build/bin/gpipe-opt")
    parser.add_argument("--gpipe-bench", default="build/bin/gpipe-bench")
    parser.add_argument("--models", default="resnet18,resnet50,transformer")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--markdown")
    args = parser.parse_args()
    return prepare(args) if args.phase == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
