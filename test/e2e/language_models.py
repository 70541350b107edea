"""Language models as users write and export them, trained in a pipeline
and compared with PyTorch step by step.

  * gpt: a GPT-2-style decoder (token and learned position embeddings,
    causal self-attention masked with `masked_fill(mask == 0, -inf)` from a
    registered `tril` buffer, GELU MLP, LM head tied to the token embedding
    `lm_head.weight = wte.weight`), next-token cross-entropy over
    [B, T, V] logits with [B, T] labels;
  * gpt_triu: the same with the mask built in forward from
    `torch.triu(torch.ones(T, T), 1).bool()` and `masked_fill(mask, -inf)`;
  * each exported in training mode (opset 17, no constant folding) with a
    static batch and with `dynamic_axes`, trained 10 steps as a two-stage
    pipeline (M = 4; SGD with momentum and AdamW), some labels set to the
    ignore index -100; every step's loss within 1e-4 relative of PyTorch's
    run with the same micro-batching, and the trainable parameters exactly
    PyTorch's named_parameters() (the mask buffer is not one of them);
  * own loss: the GPT returning its own loss from (idx, targets) with
    F.cross_entropy (nanoGPT's line, ignore_index=-1; classes on axis 1;
    reduction sum; reduction none weighed in the model) or F.nll_loss of
    F.log_softmax, trained with --loss=output:loss;
  * shared: one Linear used at three depths of a three-stage pipeline (its
    weight in every stage), SGD and AdamW against PyTorch;
  * folded inference: the GPT returning logits as [B * T, V], [T, B, V]
    or [T * B, V], exported with a static batch, runs `gpipe-run --infer`
    on more rows than the compiled batch (not a multiple of it) and matches
    PyTorch eval;
  * per-token labels: the GPT returning logits viewed [B * T, V] (for
    `F.cross_entropy(logits.view(-1, V), y.view(-1))` outside the model)
    trains from labels [N, T] in a two-stage pipeline as PyTorch does;
  * encoder: nn.TransformerEncoder (batch_first) exported with a static
    batch of 8 trains at M = 1, 2, 4 and 8 with the same losses.

usage: language_models.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import csv
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_training  # noqa: E402  (its PyTorch replay of a run)
# The optimizers, the summary's parameter line and the export call of the
# parameter test (training mode, opset 17, no constant folding).
from parameter_training import OPTIMIZERS, SUMMARY_RE, export  # noqa: E402

STEPS, BATCH, SAMPLES, SEQ, VOCAB = 10, 8, 32, 12, 48


class Block(nn.Module):
    def __init__(self, dim, heads, triu):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.heads, self.triu = heads, triu
        if not triu:
            self.register_buffer(
                "mask", torch.tril(torch.ones(SEQ, SEQ)).view(1, 1, SEQ, SEQ))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        if self.triu:
            mask = torch.triu(torch.ones(t, t), diagonal=1).bool()
            att = att.masked_fill(mask, float("-inf"))
        else:
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, triu, dim=32, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, dim), nn.Embedding(SEQ, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, triu)
                                      for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for p in self.parameters():  # small logits: a loss that falls
            nn.init.normal_(p, std=0.1) if p.dim() > 1 else None

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        return self.lm_head(self.ln_f(self.blocks(x)))


class GPTWithLoss(GPT):
    """The GPT returning its own loss from (idx, targets), as nanoGPT and
    most training scripts write it; `kind` picks how."""

    def __init__(self, kind):
        super().__init__(triu=True)
        self.kind = kind

    def forward(self, idx, targets):
        logits = super().forward(idx)
        flat, labels = logits.view(-1, VOCAB), targets.view(-1)
        if self.kind == "nanogpt":  # nanoGPT's own line
            return F.cross_entropy(flat, labels, ignore_index=-1)
        if self.kind == "transposed":  # classes on axis 1: [B, V, T]
            return F.cross_entropy(logits.transpose(1, 2), targets)
        if self.kind == "nll":
            return F.nll_loss(F.log_softmax(logits, dim=-1).view(-1, VOCAB),
                              labels)
        if self.kind == "sum":
            return F.cross_entropy(flat, labels, reduction="sum") / 100.0
        # "none": per-token losses weighed in the model.
        per_token = F.cross_entropy(flat, labels, reduction="none")
        weight = (labels != -100).float() * (1.0 + 0.01 * labels.float())
        return (per_token * weight).sum() / weight.sum()


class GPTFoldedLogits(GPT):
    """The GPT's logits with the batch folded into another dimension:
    `flat` [B * T, V] (view(-1, V)), `time_major` [T, B, V] and
    `time_major_flat` [T * B, V]."""

    def __init__(self, layout):
        super().__init__(triu=False)
        self.layout = layout

    def forward(self, idx):
        logits = super().forward(idx)
        if self.layout == "flat":
            return logits.view(-1, VOCAB)
        logits = logits.transpose(0, 1)
        if self.layout == "time_major":
            return logits
        return logits.reshape(-1, VOCAB)


class SharedLayer(nn.Module):
    """One Linear applied at three depths (ALBERT-style sharing): in a
    three-stage pipeline its weight is in every stage."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(16, 16)
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(6)])
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            if i % 2 == 1:
                x = torch.tanh(self.shared(x))
        return self.head(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0,
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def train(gpipe_opt, gpipe_run, onnx_path, data, tag, micro, devices,
          optimizer, work, flags=()):
    bundle = os.path.join(work, tag + ".gpipe")
    rc, out = run([gpipe_opt, onnx_path, "--mode=train",
                   f"--batch-size={BATCH}", f"--micro-batches={micro}",
                   f"--devices={devices}", "-o", bundle]
                  + OPTIMIZERS[optimizer][0] + list(flags))
    if rc != 0:
        return None, f"compile failed: {out.strip()}"
    log = os.path.join(work, tag + ".csv")
    rc, out = run([gpipe_run, bundle, "--train", f"--data={data}",
                   f"--steps={STEPS}", "--no-shuffle", f"--loss-log={log}"])
    if rc != 0:
        return None, f"gpipe-run failed: {out.strip()}"
    with open(log) as f:
        return [float(r["loss"]) for r in csv.DictReader(f)], None


def next_tokens(seed, ignored):
    """SAMPLES sequences and their next tokens, a tenth of the labels set
    to `ignored` (padding: counts for nothing)."""
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, VOCAB, size=(SAMPLES, SEQ + 1)).astype(np.int64)
    x, y = tokens[:, :-1].copy(), tokens[:, 1:].copy()
    y[rng.rand(*y.shape) < 0.1] = ignored
    return x, y


def loss_errors(tag, got, want):
    """Prints the run and returns its error when a step's loss is not
    within 1e-4 relative of PyTorch's."""
    worst = max(abs(g - e) / abs(e) for g, e in zip(got, want))
    print(f"{tag}: loss {got[0]:.4f} -> {got[-1]:.4f}, worst relative loss "
          f"error {worst:.2e}")
    if len(got) != STEPS or worst > 1e-4:
        return [f"losses differ (worst relative {worst:.2e}): {got[:3]}... "
                f"vs {want[:3]}..."]
    return []


def check_gpt(triu, dynamic, optimizer, gpipe_opt, gpipe_run, work):
    tag = f"gpt{'_triu' if triu else ''}_{optimizer}" + (
        "_dyn" if dynamic else "_static")
    torch.manual_seed(0)
    model = GPT(triu)
    onnx_path = os.path.join(work, tag + ".onnx")
    export(model, torch.randint(0, VOCAB, (BATCH, SEQ)), onnx_path, dynamic)
    errors = []
    rc, out = run([gpipe_opt, onnx_path, "--emit=summary"]
                  + ([f"--batch-size={BATCH}"] if dynamic else []))
    m = SUMMARY_RE.search(out)
    params = list(model.named_parameters())  # the tied weight once
    expected = (len(params), sum(p.numel() for _, p in params))
    if rc != 0 or not m or (int(m.group(1)), int(m.group(2))) != expected:
        errors.append(f"summary {m.group(0) if m else out!r}, PyTorch "
                      f"{expected[0]} trainable tensors ({expected[1]} values)")
    return errors + train_like_pytorch(model, onnx_path, tag, 3, optimizer,
                                       gpipe_opt, gpipe_run, work)


def train_like_pytorch(model, onnx_path, tag, seed, optimizer, gpipe_opt,
                       gpipe_run, work):
    """Trains the export in two stages (M = 4) on next_tokens(seed) and
    returns its losses' errors against PyTorch's run of `model`."""
    x, y = next_tokens(seed, -100)
    data = os.path.join(work, tag + ".npz")
    np.savez(data, input=x, labels=y)
    got, err = train(gpipe_opt, gpipe_run, onnx_path, data, tag, 4,
                     "cpu:0,cpu:1", optimizer, work)
    if err:
        return [err]
    want, _ = pytorch_training.torch_run(
        model, torch.from_numpy(x), torch.from_numpy(y), 4, optimizer,
        steps=STEPS, batch=BATCH, samples=SAMPLES, optimizers=OPTIMIZERS)
    return loss_errors(tag, got, want)


def check_long_sequence(triu, gpipe_opt, gpipe_run, work):
    """A GPT over 130 tokens, which gpipe-opt fuses into one attention
    kernel per layer (sequences of 128 keys and more; 130 in 3 blocks of
    44 with the causal tiles skipped), trains as PyTorch does: the mask
    from a tril buffer or from torch.triu, two stages."""
    global SEQ
    saved, SEQ = SEQ, 130
    try:
        tag = f"gpt_long{'_triu' if triu else ''}"
        torch.manual_seed(0)
        model = GPT(triu)
        onnx_path = os.path.join(work, tag + ".onnx")
        export(model, torch.randint(0, VOCAB, (BATCH, SEQ)), onnx_path, True)
        rc, out = run([gpipe_opt, onnx_path, "--mode=train",
                       f"--batch-size={BATCH}", "--devices=cpu:0,cpu:1",
                       "--micro-batches=4", "--emit=stages"])
        fused = out.count("nn.attention")
        if rc != 0 or fused != 2 or "causal = true" not in out:
            return [f"expected 2 fused causal attentions, found {fused}"]
        return train_like_pytorch(model, onnx_path, tag, 5, "adamw",
                                  gpipe_opt, gpipe_run, work)
    finally:
        SEQ = saved


def check_own_loss(kind, dynamic, gpipe_opt, gpipe_run, work):
    """A model that computes its loss (SoftmaxCrossEntropyLoss or
    NegativeLogLikelihoodLoss in the export) trains with
    --loss=output:loss, its labels read as a second model input."""
    tag = f"own_loss_{kind}" + ("_dyn" if dynamic else "_static")
    torch.manual_seed(0)
    model = GPTWithLoss(kind)
    onnx_path = os.path.join(work, tag + ".onnx")
    example = (torch.randint(0, VOCAB, (BATCH, SEQ)),
               torch.randint(0, VOCAB, (BATCH, SEQ)))
    model.train()
    torch.onnx.export(
        model, example, onnx_path, opset_version=17,
        training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
        input_names=["idx", "targets"], output_names=["loss"],
        dynamic_axes={"idx": {0: "batch"}, "targets": {0: "batch"}}
        if dynamic else None)
    x, y = next_tokens(5, -1 if kind == "nanogpt" else -100)
    data = os.path.join(work, tag + ".npz")
    np.savez(data, idx=x, targets=y)
    got, err = train(gpipe_opt, gpipe_run, onnx_path, data, tag, 4,
                     "cpu:0,cpu:1", "sgd", work, ["--loss=output:loss"])
    if err:
        return [err]
    want, _ = pytorch_training.torch_run(
        model, torch.from_numpy(x), torch.from_numpy(y), 4, "sgd",
        loss="output", steps=STEPS, batch=BATCH, samples=SAMPLES,
        optimizers=OPTIMIZERS)
    return loss_errors(tag, got, want)


def check_per_token_labels(gpipe_opt, gpipe_run, work):
    """Logits [B * T, V] train from labels [N, T]: T labels a sample, in
    the order of the logits' rows."""
    tag = "per_token_labels"
    torch.manual_seed(0)
    model = GPTFoldedLogits("flat")
    onnx_path = os.path.join(work, tag + ".onnx")
    export(model, torch.randint(0, VOCAB, (BATCH, SEQ)), onnx_path, False)
    x, y = next_tokens(5, -100)
    data = os.path.join(work, tag + ".npz")
    np.savez(data, input=x, labels=y)
    got, err = train(gpipe_opt, gpipe_run, onnx_path, data, tag, 4,
                     "cpu:0,cpu:1", "sgd", work)
    if err:
        return [err]
    want, _ = pytorch_training.torch_run(
        model, torch.from_numpy(x), torch.from_numpy(y), 4, "sgd",
        steps=STEPS, batch=BATCH, samples=SAMPLES, optimizers=OPTIMIZERS)
    return loss_errors(tag, got, want)


def check_folded_inference(layout, gpipe_opt, gpipe_run, work):
    """gpipe-run --infer splits rows that are not the compiled batch also
    for outputs that fold the batch into another dimension, and puts each
    run's rows where PyTorch has them."""
    tag = f"folded_{layout}"
    torch.manual_seed(0)
    model = GPTFoldedLogits(layout).eval()
    onnx_path = os.path.join(work, tag + ".onnx")
    export(model, torch.randint(0, VOCAB, (BATCH, SEQ)), onnx_path, False)
    bundle = os.path.join(work, tag + ".gpipe")
    rc, out = run([gpipe_opt, onnx_path, "-o", bundle])
    if rc != 0:
        return [f"compile failed: {out.strip()}"]
    errors = []
    rng = np.random.RandomState(2)
    for rows in (BATCH, 2 * BATCH + 3):
        x = rng.randint(0, VOCAB, size=(rows, SEQ)).astype(np.int64)
        x_path = os.path.join(work, f"{tag}_{rows}.npy")
        out_dir = os.path.join(work, f"{tag}_{rows}_out")
        np.save(x_path, x)
        rc, out = run([gpipe_run, bundle, "--infer", f"--input=input={x_path}",
                       "--output", out_dir])
        if rc != 0:
            errors.append(f"{rows} rows: gpipe-run failed: {out.strip()}")
            continue
        got = np.load(os.path.join(out_dir, "logits.npy"))
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        if got.shape != want.shape:
            errors.append(f"{rows} rows: shape {got.shape}, PyTorch "
                          f"{want.shape}")
            continue
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        print(f"{tag}: {rows} rows, logits {list(got.shape)}, relative L2 "
              f"error {err:.2e}")
        if not err < 1e-5:
            errors.append(f"{rows} rows: relative L2 error {err:.2e}")
    return errors


def check_shared_three_stages(optimizer, gpipe_opt, gpipe_run, work,
                              schedule="gpipe"):
    """A weight used in all three stages of a pipeline: its gradients are
    summed over the three before the step, equal to PyTorch (under zb-h1
    each stage's gradients come from its backward's second part)."""
    tag = f"shared_{optimizer}_{schedule}"
    torch.manual_seed(0)
    model = SharedLayer()
    onnx_path = os.path.join(work, tag + ".onnx")
    export(model, torch.randn(BATCH, 16), onnx_path, dynamic=False)
    rng = np.random.RandomState(4)
    x = rng.randn(SAMPLES, 16).astype(np.float32)
    y = rng.randint(0, 5, size=SAMPLES).astype(np.int64)
    data = os.path.join(work, tag + ".npz")
    np.savez(data, input=x, labels=y)
    got, err = train(gpipe_opt, gpipe_run, onnx_path, data, tag, 4,
                     "cpu:0,cpu:1,cpu:0", optimizer, work,
                     flags=(f"--schedule={schedule}",))
    if err:
        return [err]
    want, _ = pytorch_training.torch_run(
        model, torch.from_numpy(x), torch.from_numpy(y), 4, optimizer,
        steps=STEPS, batch=BATCH, samples=SAMPLES, optimizers=OPTIMIZERS)
    return loss_errors(f"{tag} (three stages)", got, want)


def check_encoder(gpipe_opt, gpipe_run, work):
    torch.manual_seed(0)
    model = Encoder()
    onnx_path = os.path.join(work, "encoder_static.onnx")
    export(model, torch.randn(BATCH, 6, 16), onnx_path, dynamic=False)
    rng = np.random.RandomState(1)
    x = rng.randn(SAMPLES, 6, 16).astype(np.float32)
    y = rng.randint(0, 5, size=SAMPLES).astype(np.int64)
    data = os.path.join(work, "encoder.npz")
    np.savez(data, input=x, labels=y)
    runs, errors = {}, []
    for micro in (1, 2, 4, 8):
        got, err = train(gpipe_opt, gpipe_run, onnx_path, data,
                         f"encoder_m{micro}", micro, "cpu:0,cpu:1", "sgd",
                         work)
        if err:
            errors.append(f"M={micro}: {err}")
            continue
        runs[micro] = got
    want, _ = pytorch_training.torch_run(
        model, torch.from_numpy(x), torch.from_numpy(y), 1, "sgd",
        steps=STEPS, batch=BATCH, samples=SAMPLES, optimizers=OPTIMIZERS)
    for micro, got in runs.items():
        worst = max(abs(g - e) / abs(e) for g, e in zip(got, want))
        if len(got) != STEPS or worst > 1e-4:
            errors.append(f"M={micro}: losses differ from M=1 PyTorch (worst "
                          f"relative {worst:.2e})")
        print(f"encoder static batch, M={micro}: loss {got[0]:.4f} -> "
              f"{got[-1]:.4f}, worst relative loss error {worst:.2e}")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failed = total = 0
    cases = [(triu, dynamic, optimizer) for triu in (False, True)
             for dynamic in (False, True) for optimizer in ("sgd", "adamw")
             if not (triu and optimizer == "adamw")]
    for triu, dynamic, optimizer in cases:
        total += 1
        errors = check_gpt(triu, dynamic, optimizer, gpipe_opt, gpipe_run, work)
        for e in errors:
            print(f"FAIL gpt triu={triu} dynamic={dynamic} {optimizer}: {e}")
        failed += bool(errors)
    for triu in (False, True):
        total += 1
        errors = check_long_sequence(triu, gpipe_opt, gpipe_run, work)
        for e in errors:
            print(f"FAIL long sequence triu={triu}: {e}")
        failed += bool(errors)
    for kind, dynamic in (("nanogpt", False), ("nanogpt", True),
                          ("transposed", False), ("nll", False),
                          ("sum", False), ("none", False)):
        total += 1
        errors = check_own_loss(kind, dynamic, gpipe_opt, gpipe_run, work)
        for e in errors:
            print(f"FAIL own loss {kind} dynamic={dynamic}: {e}")
        failed += bool(errors)
    for optimizer, schedule in (("sgd", "gpipe"), ("adamw", "gpipe"),
                                ("sgd", "zb-h1")):
        total += 1
        errors = check_shared_three_stages(optimizer, gpipe_opt, gpipe_run,
                                           work, schedule)
        for e in errors:
            print(f"FAIL shared weight in three stages {optimizer} "
                  f"{schedule}: {e}")
        failed += bool(errors)
    for layout in ("flat", "time_major", "time_major_flat"):
        total += 1
        errors = check_folded_inference(layout, gpipe_opt, gpipe_run, work)
        for e in errors:
            print(f"FAIL folded inference {layout}: {e}")
        failed += bool(errors)
    total += 1
    errors = check_per_token_labels(gpipe_opt, gpipe_run, work)
    for e in errors:
        print(f"FAIL per-token labels: {e}")
    failed += bool(errors)
    total += 1
    errors = check_encoder(gpipe_opt, gpipe_run, work)
    for e in errors:
        print(f"FAIL encoder: {e}")
    failed += bool(errors)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
