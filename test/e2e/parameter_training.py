"""Every parameter a model trains is trained: models that slice, index or
split their own weights (a position table used as `pos[:T]`, embeddings
looked up by token and by `arange(T)`, nn.MultiheadAttention with a query
that is not its key, which splits `in_proj_weight` and `in_proj_bias`, a
parameter tiled with `.repeat` next to rank-5 batched matmuls).

For each model: export in training mode (opset 17, no constant folding,
static batch and `dynamic_axes`), then
  * `gpipe-opt --emit=summary`: the trainable tensors are exactly PyTorch's
    `named_parameters()` (names and sizes), nothing else is trainable;
  * train 10 steps (SGD with momentum and AdamW; M = 1 and 2, one stage and
    a two-stage pipeline) and replay them in PyTorch: every step's loss
    within 1e-4 relative, the final parameters within 1e-3 relative L2, and
    every parameter changed by the training.

usage: parameter_training.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import csv
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_training  # noqa: E402  (its PyTorch replay of a run)

STEPS, BATCH, SAMPLES, SEQ, VOCAB = 10, 8, 32, 6, 20


class EmbeddingClassifier(nn.Module):
    """Tokens through an embedding table, a learned position table sliced to
    the sequence (`pos[:T]`, GPT-2's wpe as a Parameter) and a second
    position embedding looked up with `arange(T)` (BERT's), then a mean
    over the sequence and a linear head."""

    def __init__(self, dim=16, classes=5):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.randn(SEQ + 4, dim) * 0.1)
        self.pos_ids = nn.Embedding(SEQ + 4, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        t = x.shape[1]
        h = self.tokens(x) + self.pos[:t] + self.pos_ids(
            torch.arange(t, device=x.device))
        return self.head(torch.tanh(h).mean(dim=1))


class CrossAttention(nn.Module):
    """nn.MultiheadAttention whose query (the first two positions) is not
    its key: PyTorch splits in_proj_weight/in_proj_bias into the query's
    and the key-value's parts."""

    def __init__(self, dim=16, classes=5):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        out, _ = self.attn(x[:, :2], x, x, need_weights=False)
        return self.head(out.mean(dim=1))


class TiledMixer(nn.Module):
    """Tile on an input (`x.repeat`) and on a parameter (`pattern.repeat`),
    and batched matmuls of rank 5 broadcast against a rank-4 parameter and
    against themselves."""

    def __init__(self, dim=16, classes=5):
        super().__init__()
        self.proj = nn.Linear(8, dim)
        self.pattern = nn.Parameter(torch.randn(2, dim // 2) * 0.1)
        self.mix = nn.Parameter(torch.randn(3, 1, 4, 4) * 0.3)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        b = x.shape[0]
        h = torch.tanh(self.proj(x.repeat(1, 1, 2)))
        h = h + self.pattern.repeat(SEQ // 2, 2)
        g = torch.matmul(h.view(b, 1, SEQ, 4, 4), self.mix)
        g = torch.matmul(g, g.transpose(-1, -2))
        return self.head(g.mean(dim=(1, 2)).reshape(b, 16))


def embedding_classifier():
    torch.manual_seed(0)
    return EmbeddingClassifier(), torch.randint(0, VOCAB, (BATCH, SEQ))


def cross_attention():
    torch.manual_seed(0)
    return CrossAttention(), torch.randn(BATCH, SEQ, 16)


def tiled_mixer():
    torch.manual_seed(0)
    return TiledMixer(), torch.randn(BATCH, SEQ, 4)


MODELS = {"embedding_classifier": embedding_classifier,
          "cross_attention": cross_attention, "tiled_mixer": tiled_mixer}
OPTIMIZERS = {
    "sgd": (["--optimizer=sgd", "--lr=0.1", "--momentum=0.9"],
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    # eps 1e-6: attention's key bias has a gradient of exactly zero (softmax
    # ignores a constant added to a row); Adam with eps 1e-8 turns the
    # float32 rounding noise there (~1e-10) into full steps of either sign
    # (as in pytorch_training.py).
    "adamw": (["--optimizer=adamw", "--lr=0.01", "--weight-decay=0.01",
               "--eps=1e-6"],
              lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01,
                                          eps=1e-6)),
}
# (optimizer, micro-batches, devices, dynamic batch axis)
CASES = [("sgd", 1, "cpu:0", False), ("adamw", 2, "cpu:0,cpu:1", False),
         ("sgd", 2, "cpu:0,cpu:1", True)]
SUMMARY_RE = re.compile(r"^parameters: (\d+) trainable tensors \((\d+) values\)",
                        re.M)


def export(model, example, path, dynamic):
    model.train()
    torch.onnx.export(
        model, example, path, opset_version=17,
        training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
        input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}
        if dynamic else None)


def batch_flag(dynamic):
    """A static export keeps its batch; a dynamic one needs it given."""
    return [f"--batch-size={BATCH}"] if dynamic else []


def check_summary(gpipe_opt, onnx_path, model, dynamic):
    proc = subprocess.run([gpipe_opt, onnx_path, "--emit=summary"]
                          + batch_flag(dynamic), capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"--emit=summary failed: {proc.stderr.strip()}"]
    m = SUMMARY_RE.search(proc.stdout)
    params = dict(model.named_parameters())
    count = len(params)
    values = sum(p.numel() for p in params.values())
    if not m or (int(m.group(1)), int(m.group(2))) != (count, values):
        return [f"summary: {m.group(0) if m else proc.stdout!r}, PyTorch: "
                f"{count} trainable tensors ({values} values)"]
    return []


def check_trainable_names(gpipe_opt, onnx_path, model, work, dynamic):
    mlir = os.path.join(work, os.path.basename(onnx_path) + ".mlir")
    proc = subprocess.run([gpipe_opt, onnx_path, "--emit=nn", "-o", mlir]
                          + batch_flag(dynamic), capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"--emit=nn failed: {proc.stderr.strip()}"]
    found = {}
    for line in open(mlir):
        m = re.match(r'\s*gpipe\.parameter @("(?:[^"\\]|\\.)*"|[\w.$]+) '
                     r'trainable = \S+ : tensor<([0-9x]*)x?f32>', line)
        if m:
            shape = tuple(int(d) for d in m.group(2).split("x") if d)
            found[m.group(1).strip('"')] = shape
    expected = {n: tuple(p.shape) for n, p in model.named_parameters()}
    if found != expected:
        return [f"trainable parameters: gpipe {sorted(found.items())}, "
                f"PyTorch {sorted(expected.items())}"]
    return []


def check(name, optimizer, micro, devices, dynamic, gpipe_opt, gpipe_run,
          work):
    tag = f"{name}_{optimizer}_m{micro}_k{devices.count(',') + 1}" + (
        "_dyn" if dynamic else "")
    model, example = MODELS[name]()
    onnx_path = os.path.join(work, tag + ".onnx")
    export(model, example if dynamic else example[: BATCH // micro],
           onnx_path, dynamic)
    errors = check_summary(gpipe_opt, onnx_path, model, dynamic)
    errors += check_trainable_names(gpipe_opt, onnx_path, model, work, dynamic)
    bundle = os.path.join(work, tag + ".gpipe")
    proc = subprocess.run(
        [gpipe_opt, onnx_path, "--mode=train", f"--batch-size={BATCH}",
         f"--micro-batches={micro}", f"--devices={devices}", "-o", bundle]
        + OPTIMIZERS[optimizer][0], capture_output=True, text=True)
    if proc.returncode != 0:
        return errors + [f"compile failed: {proc.stderr.strip()}"]
    rng = np.random.RandomState(7)
    if example.dtype == torch.int64:
        x = rng.randint(0, VOCAB, size=(SAMPLES, SEQ)).astype(np.int64)
    else:
        x = rng.randn(SAMPLES, *example.shape[1:]).astype(np.float32)
    y = rng.randint(0, 5, size=SAMPLES).astype(np.int64)
    data = os.path.join(work, tag + ".npz")
    np.savez(data, input=x, labels=y)
    log, params = os.path.join(work, tag + ".csv"), os.path.join(work, tag + "_params")
    initial = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    proc = subprocess.run(
        [gpipe_run, bundle, "--train", f"--data={data}", f"--steps={STEPS}",
         "--no-shuffle", f"--loss-log={log}", f"--save-params={params}"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        return errors + [f"gpipe-run failed: {proc.stderr.strip()}"]
    with open(log) as f:
        got = [float(r["loss"]) for r in csv.DictReader(f)]
    expected, _ = pytorch_training.torch_run(
        model, torch.from_numpy(x), torch.from_numpy(y), micro, optimizer,
        steps=STEPS, batch=BATCH, samples=SAMPLES, optimizers=OPTIMIZERS)
    worst = max(abs(g - e) / abs(e) for g, e in zip(got, expected))
    if len(got) != STEPS or worst > 1e-4:
        errors.append(f"losses differ (worst relative {worst:.2e}): "
                      f"{got[:3]}... vs {expected[:3]}...")
    worst_param, worst_name = 0.0, ""
    for n, p in model.named_parameters():
        path = os.path.join(params, n + ".npy")
        if not os.path.exists(path):
            errors.append(f"--save-params has no {n}")
            continue
        mine = np.load(path)
        if np.array_equal(mine, initial[n]):
            errors.append(f"{n} did not change in training")
        ref = p.detach().numpy()
        rel = float(np.linalg.norm(mine - ref) / max(np.linalg.norm(ref), 1e-30))
        if rel > worst_param:
            worst_param, worst_name = rel, n
    if worst_param > 1e-3:
        errors.append(f"parameters differ: relative L2 {worst_param:.2e} "
                      f"({worst_name})")
    print(f"{tag}: loss {got[0]:.4f} -> {got[-1]:.4f}, worst loss error "
          f"{worst:.2e}, worst parameter error {worst_param:.2e}")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failed = total = 0
    for name in MODELS:
        for optimizer, micro, devices, dynamic in CASES:
            total += 1
            errors = check(name, optimizer, micro, devices, dynamic,
                           gpipe_opt, gpipe_run, work)
            for e in errors:
                print(f"FAIL {name} {optimizer} M={micro} {devices}: {e}")
            failed += bool(errors)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
