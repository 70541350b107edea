"""Exports a PyTorch MLP (64 -> 256 -> 256 -> 10, ReLU) to ONNX as users
do (torch.onnx.export, static batch of 128), and random training data.

Usage: export_wide_mlp.py OUT.onnx OUT.npz
"""
import sys

import numpy as np
import torch
import torch.nn as nn


def main():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256),
                          nn.ReLU(), nn.Linear(256, 10))
    x = torch.randn(128, 64)
    torch.onnx.export(model, x, sys.argv[1], input_names=["x"],
                      output_names=["y"])
    r = np.random.default_rng(4)
    np.savez(sys.argv[2], x=r.normal(size=(512, 64)).astype(np.float32),
             labels=r.integers(0, 10, 512))


if __name__ == "__main__":
    main()
