"""Registered buffers are never trained (PyTorch never trains a buffer; ONNX
stores buffers and parameters alike as initializers).

Three models whose buffers reach the loss through differentiable ops:
  * an attention classifier with an additive causal mask kept as a buffer
    (`register_buffer("mask", torch.triu(torch.full((T, T), -inf), 1))`,
    added to the scores): frozen because it holds infinities;
  * nn.Transformer (encoder-decoder) with its `tgt_mask` kept as a buffer
    (`generate_square_subsequent_mask`, -inf above the diagonal);
  * PyTorch's word_language_model TransformerModel's PositionalEncoding
    (its sin/cos `pe` table, finite: only its name says it is a buffer),
    copied as the example writes it, in a batch-first model.
For each:
  * `gpipe-opt --emit=summary` lists as trainable exactly
    `named_parameters()` — for the masks with no flag, for the position
    table with `--freeze=*.pe` (without it, the table is listed as
    trainable: the command line cannot tell);
  * `gpipe.compile(module)` (which passes the module's buffers as frozen)
    trains 50 SGD-momentum steps in a two-stage pipeline of 2
    micro-batches on the same data in the same order as a PyTorch replay
    in float32 and one in float64. The first 10 steps' losses are within
    1e-5 relative of PyTorch float32 (measured: <= 1e-7; no BatchNorm, no
    dropout, so nothing but rounding order differs). Over 50 steps of lr
    0.05 with momentum these Transformers are chaotic in float32 (PyTorch
    float32 drifts 1e-2 from float64 by step 45 on the position-table
    model), so the whole run is judged as docs/training.md judges
    ResNet-18: gpipe's distance from float64 (the largest relative loss
    difference over the steps; each parameter's relative L2 at the end) is
    at most 4 times PyTorch float32's own, plus 1e-5 (losses) or 1e-4
    (parameters) for runs where both are at rounding level. No loss is
    NaN, every parameter changed, and no buffer changed.

usage: buffers_frozen.py WORK_DIR   (gpipe-opt on PATH or GPIPE_OPT)
"""
import copy
import math
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

import gpipe

STEPS, BATCH, SAMPLES, SEQ, DIM, CLASSES = 50, 8, 64, 8, 16, 4
LR, MOMENTUM = 0.05, 0.9


class MaskedAttention(nn.Module):
    """One head of causal self-attention whose mask is an additive -inf
    buffer, then a mean over the sequence and a linear head."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.head = nn.Linear(DIM, CLASSES)
        self.register_buffer("mask", torch.triu(
            torch.full((SEQ, SEQ), float("-inf")), 1))

    def forward(self, x):
        q, k, v = self.qkv(x).split(DIM, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(DIM) + self.mask
        return self.head((torch.softmax(scores, -1) @ v).mean(dim=1))


class Seq2Seq(nn.Module):
    """nn.Transformer with its causal target mask kept as a buffer."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.Transformer(
            d_model=DIM, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
            dim_feedforward=32, dropout=0.0, batch_first=True)
        self.register_buffer(
            "tgt_mask", nn.Transformer.generate_square_subsequent_mask(SEQ))
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, src, tgt):
        out = self.transformer(src, tgt, tgt_mask=self.tgt_mask)
        return self.head(out.mean(dim=1))


class PositionalEncoding(nn.Module):
    """word_language_model/model.py's, as written there (dropout 0 here)."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class WordLanguageModel(nn.Module):
    """word_language_model's TransformerModel (embedding * sqrt(d), the
    positional encoding on [T, B, d], a TransformerEncoder), batch-first
    at its input and a classification head."""

    def __init__(self, tokens=20):
        super().__init__()
        self.encoder = nn.Embedding(tokens, DIM)
        self.pos_encoder = PositionalEncoding(DIM, dropout=0.0, max_len=64)
        layer = nn.TransformerEncoderLayer(DIM, 2, 32, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(layer, 1)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, src):
        x = self.encoder(src.transpose(0, 1)) * math.sqrt(DIM)
        x = self.transformer_encoder(self.pos_encoder(x))
        return self.head(x.mean(dim=0))


def cases(rng):
    floats = lambda: rng.standard_normal((SAMPLES, SEQ, DIM)).astype(
        np.float32)
    yield "additive -inf mask buffer", MaskedAttention(), {"x": floats()}, []
    yield "nn.Transformer tgt_mask buffer", Seq2Seq(), {
        "src": floats(), "tgt": floats()}, []
    yield "word_language_model pe table", WordLanguageModel(), {
        "src": rng.integers(0, 20, (SAMPLES, SEQ))}, ["--freeze=*.pe"]


def summary_trainable(onnx_path, flags):
    out = subprocess.run(
        [os.environ.get("GPIPE_OPT", "gpipe-opt"), onnx_path,
         "--emit=summary"] + flags, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return {m.group(1): tuple(int(d) for d in m.group(2).split("x")[:-1])
            for m in re.finditer(r"^trainable: (\S+) tensor<([0-9x]*f32)>",
                                 out.stdout, re.M)}


def torch_replay(model, arrays, labels):
    """50 steps of SGD momentum on [i*B, (i+1)*B) in order, as
    train(shuffle=False) takes them, in the model's dtype."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for step in range(STEPS):
        rows = [(step * BATCH + j) % SAMPLES for j in range(BATCH)]
        inputs = [torch.from_numpy(a[rows]) for a in arrays.values()]
        loss = nn.functional.cross_entropy(
            model(*inputs), torch.from_numpy(labels[rows]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def check(name, model, arrays, flags, work):
    failures = []
    rng = np.random.default_rng(1)
    labels = rng.integers(0, CLASSES, SAMPLES)
    example = tuple(torch.from_numpy(a[:BATCH]) for a in arrays.values())
    expected = {n: tuple(p.shape) for n, p in model.named_parameters()}

    onnx_path = os.path.join(work, name.split()[0] + ".onnx")
    gpipe.export(model, example, onnx_path)
    found = summary_trainable(onnx_path, flags)
    if found != expected:
        failures.append(f"summary {' '.join(flags)}: trainable "
                        f"{sorted(found)}, named_parameters {sorted(expected)}")

    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    model64 = copy.deepcopy(model).double()
    arrays64 = {k: a.astype(np.float64) if a.dtype == np.float32 else a
                for k, a in arrays.items()}
    bundle = gpipe.compile(model, example, devices="cpu:0,cpu:1",
                           micro_batches=2, optimizer="sgd", lr=LR,
                           momentum=MOMENTUM, quiet=True)
    result = bundle.train(dict(arrays, labels=labels), steps=STEPS,
                          shuffle=False, quiet=True)
    trained = bundle.parameters()
    losses = np.array(torch_replay(model, arrays, labels))
    losses64 = np.array(torch_replay(model64, arrays64, labels))

    got = np.array(list(result), dtype=np.float64)
    if not np.all(np.isfinite(got)):
        failures.append(f"losses not finite: {got[:5]} ...")
    early = np.max(np.abs(got[:10] - losses[:10]) / np.abs(losses[:10]))
    if early > 1e-5:
        failures.append(f"first 10 losses differ by {early:.2e} relative "
                        f"(first {got[:3]} vs {losses[:3]})")
    ours = np.max(np.abs(got - losses64) / np.abs(losses64))
    torchs = np.max(np.abs(losses - losses64) / np.abs(losses64))
    if ours > 4 * torchs + 1e-5:
        failures.append(f"losses {ours:.2e} from float64, PyTorch float32 "
                        f"{torchs:.2e} (limit 4x + 1e-5)")
    params64 = dict(model64.named_parameters())
    for n, p in model.named_parameters():
        if n not in trained:
            failures.append(f"parameter {n} not trained by gpipe")
            continue
        ref = params64[n].detach().numpy()
        norm = np.linalg.norm(ref)
        mine = np.linalg.norm(np.asarray(trained[n], np.float64) - ref) / norm
        theirs = np.linalg.norm(p.detach().double().numpy() - ref) / norm
        if mine > 4 * theirs + 1e-4:
            failures.append(f"parameter {n}: relative L2 from float64 "
                            f"{mine:.2e}, PyTorch float32 {theirs:.2e}")
        if torch.equal(torch.from_numpy(np.asarray(trained[n])),
                       initial[n]):
            failures.append(f"parameter {n} did not change")
    for n, b in buffers.items():
        if n in trained and not np.array_equal(np.asarray(trained[n]),
                                               b.numpy()):
            failures.append(f"buffer {n} changed during training")
    print(("PASS " if not failures else "FAIL ") + name +
          f": trainable = named_parameters ({len(expected)}); first 10 "
          f"steps within {early:.1e} of PyTorch; {STEPS} steps {ours:.1e} "
          f"from float64 (PyTorch float32 {torchs:.1e})")
    return failures


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    failures = []
    for name, model, arrays, flags in cases(np.random.default_rng(0)):
        for f in check(name, model, arrays, flags, work):
            print(f"FAIL {name}: {f}")
            failures.append(f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
