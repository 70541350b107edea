"""How far PyTorch's own float32 training of ResNet-18 drifts from the same
training in float64: the floor under any float32 implementation's agreement
with PyTorch (docs/training.md, "Not done yet").

Same model (torchvision ResNet-18, seed 0), same random data (seed 5), same
micro-batch gradient accumulation as test/e2e/pytorch_training.py; 20 steps,
batch 32. Prints, per setup, the relative loss difference every third step,
the worst per-tensor relative L2 parameter difference after 20 steps and
the relative L2 difference over all parameters together.

usage: bench/resnet18_float_drift.py [SIZE SAMPLES MICRO OPTIMIZER LABELS LR]
(no arguments: the setups of docs/training.md, a few minutes on 2 cores)
"""
import copy
import sys

import numpy as np
import torch
import torchvision

STEPS, BATCH = 20, 32
SETUPS = [
    # input size, samples, micro-batches, optimizer, labels, SGD lr
    (32, 96, 1, "sgd", "random", 0.01),   # the test's setup
    (32, 96, 4, "sgd", "random", 0.01),
    (64, 96, 1, "sgd", "random", 0.01),
    (128, 640, 1, "sgd", "random", 0.01),
    (32, 640, 1, "sgd", "random", 0.001),
    (32, 640, 1, "sgd", "random", 0.0001),
    (32, 640, 4, "sgd", "learnable", 0.01),
    (32, 640, 1, "adamw", "random", 0.0),
]


def train(model, x, y, micro, optimizer, lr, samples):
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses = []
    for step in range(STEPS):
        rows = [(step * BATCH + r) % samples for r in range(BATCH)]
        opt.zero_grad()
        total = 0.0
        for xc, yc in zip(x[rows].chunk(micro), y[rows].chunk(micro)):
            loss = loss_fn(model(xc), yc)
            (loss / micro).backward()
            total += loss.item() / micro
        opt.step()
        losses.append(total)
    return losses, {n: p.detach().double().numpy().copy()
                    for n, p in model.named_parameters()}


def drift(size, samples, micro, optimizer, labels, lr):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    rng = np.random.RandomState(5)
    x = rng.randn(samples, 3, size, size).astype(np.float32)
    if labels == "random":
        y = rng.randint(0, 10, size=samples)
    else:  # a fixed random linear map of the input decides the class
        w = rng.randn(x[0].size, 10)
        y = (x.reshape(samples, -1) @ w).argmax(1)
    y = torch.from_numpy(y.astype(np.int64))
    x = torch.from_numpy(x)
    model64 = copy.deepcopy(model).double()
    l32, p32 = train(model, x, y, micro, optimizer, lr, samples)
    l64, p64 = train(model64, x.double(), y, micro, optimizer, lr, samples)
    rel = [abs(a - b) / abs(b) for a, b in zip(l32, l64)]
    per_tensor = {n: np.linalg.norm(p32[n] - p64[n]) / np.linalg.norm(p64[n])
                  for n in p32}
    worst = max(per_tensor, key=per_tensor.get)
    whole = (np.sqrt(sum(np.sum((p32[n] - p64[n]) ** 2) for n in p32))
             / np.sqrt(sum(np.sum(p64[n] ** 2) for n in p32)))
    print(f"{size}x{size}, {samples} samples, M={micro}, {optimizer}"
          f"{f' lr {lr:g}' if optimizer == 'sgd' else ''}, {labels} labels: "
          f"loss {l32[0]:.3f} -> {l32[-1]:.3f}; relative loss difference at "
          f"steps 1,4,..,19: " + " ".join(f"{r:.0e}" for r in rel[::3])
          + f"; after {STEPS} steps worst tensor {per_tensor[worst]:.1e} "
          f"({worst}), all parameters {whole:.1e}", flush=True)


def main():
    torch.set_num_threads(2)
    if len(sys.argv) == 7:
        a = sys.argv[1:]
        drift(int(a[0]), int(a[1]), int(a[2]), a[3], a[4], float(a[5]))
        return
    for setup in SETUPS:
        drift(*setup)


if __name__ == "__main__":
    main()
