"""A sequence-first token model ([T, N] ids in, [T, N, V] logits out, the
batch on axis 1 as `dynamic_axes` names it) exported to PREFIX.onnx, and
its data in PREFIX.npz: [T, N] token ids under a name that is not the
model input's, and [T, N] labels.

usage: sequence_first_tokens.py PREFIX
"""
import sys

import numpy as np
import torch
import torch.nn as nn


class Tokens(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16)

    def forward(self, src):
        return self.head(self.embed(src))


prefix = sys.argv[1]
torch.manual_seed(0)
seq = 5
torch.onnx.export(Tokens(), torch.randint(0, 16, (seq, 4)), prefix + ".onnx",
                  opset_version=17, input_names=["src"],
                  output_names=["logits"], dynamic_axes={"src": {1: "batch"}})
rng = np.random.RandomState(2)
np.savez(prefix + ".npz", tokens=rng.randint(0, 16, (seq, 64)),
         labels=rng.randint(0, 16, (seq, 64)))
