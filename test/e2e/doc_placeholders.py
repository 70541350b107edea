"""Makes the files that the docs' synopsis commands name as placeholders.

A fenced `sh` block of README.md or docs/*.md preceded by an HTML comment

    <!-- placeholders: SHELL COMMANDS -->

is a command a reader adapts (model.onnx is their model); the documentation
test (doc_commands.py) runs the comment's commands first, in the same
directory, then the block as written. The comments call this script:

    doc_placeholders.py mlp MODEL.onnx [--batch N] [--data FILE.npz]
        [--input FILE.npy]
      a 3-layer MLP (input 'x' [N, 32] -> 10 classes, training-mode export
      with a static batch N, default 64); --data writes 512 random samples
      and labels, --input 16 rows for --infer.
    doc_placeholders.py gpt MODEL.onnx --data FILE.npz
      a 2-layer GPT over bytes computing its own loss (inputs 'idx' and
      'targets' [B, 16], output 'loss', dynamic batch); --data writes 64
      sequences as arrays 'idx' and 'targets'.
    doc_placeholders.py byte-gpt MODEL.onnx
      examples/byte_gpt.py's model, small (context 32, 2 layers of 32).
"""
import argparse
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def export(model, example, path, inputs, outputs, dynamic=None):
    torch.onnx.export(model.train(), example, path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=inputs,
                      output_names=outputs, dynamic_axes=dynamic)


def mlp(args):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64),
                          nn.ReLU(), nn.Linear(64, 10))
    export(model, torch.randn(args.batch, 32), args.model, ["x"], ["logits"])
    rng = np.random.default_rng(0)
    if args.data:
        np.savez(args.data, x=rng.standard_normal((512, 32), dtype=np.float32),
                 labels=rng.integers(0, 10, 512))
    if args.input:
        np.save(args.input, rng.standard_normal((16, 32), dtype=np.float32))


class TinyGPT(nn.Module):
    """nanoGPT's shape: forward(idx, targets) returns the loss."""

    def __init__(self, context=16, dim=32, heads=2, layers=2):
        super().__init__()
        self.wte = nn.Embedding(256, dim)
        self.wpe = nn.Embedding(context, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.register_buffer("mask", torch.triu(
            torch.full((context, context), float("-inf")), 1))
        self.lm_head = nn.Linear(dim, 256, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        logits = self.lm_head(self.blocks(x, mask=self.mask))
        return F.cross_entropy(logits.view(-1, logits.size(-1)),
                               targets.view(-1), ignore_index=-1)


def gpt(args):
    torch.manual_seed(0)
    idx = torch.randint(0, 256, (2, 16))
    export(TinyGPT(), (idx, idx), args.model, ["idx", "targets"], ["loss"],
           {"idx": {0: "batch"}, "targets": {0: "batch"}})
    tokens = np.random.default_rng(0).integers(0, 256, (64, 17))
    np.savez(args.data, idx=tokens[:, :-1], targets=tokens[:, 1:])


def byte_gpt(args):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from byte_gpt import ByteGPT
    torch.manual_seed(0)
    export(ByteGPT(32, 32, 2, 2), torch.randint(0, 256, (2, 32)), args.model,
           ["input"], ["logits"],
           {"input": {0: "batch"}, "logits": {0: "batch"}})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["mlp", "gpt", "byte-gpt"])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--data")
    parser.add_argument("--input")
    args = parser.parse_args()
    {"mlp": mlp, "gpt": gpt, "byte-gpt": byte_gpt}[args.kind](args)


if __name__ == "__main__":
    main()
