"""A small GPT-style byte-level language model (a vocabulary of the 256
byte values, learned positions, causal self-attention from a registered
`tril` mask, GELU MLPs, LM head tied to the byte embedding), exported to
ONNX the way gpipe expects models: opset 17, training mode, no constant
folding, the batch dynamic.

Its input `input` is int64 byte ids [batch, T], its output `logits`
float32 [batch, T, 256]: train it with `gpipe-run --train --data=TEXT`
(sequences of T bytes, each labelled with the next bytes) and continue a
prompt with `gpipe-run --infer --generate=N --prompt=TEXT`.

usage: byte_gpt.py --output model.onnx [--context T] [--dim D]
       [--layers L] [--heads H] [--seed S]
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(context, context))
                             .view(1, 1, context, context))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class ByteGPT(nn.Module):
    def __init__(self, context, dim, layers, heads):
        super().__init__()
        self.wte = nn.Embedding(256, dim)
        self.wpe = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, context)
                                      for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, 256, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        return self.lm_head(self.ln_f(self.blocks(x)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = ByteGPT(args.context, args.dim, args.layers, args.heads).train()
    example = torch.randint(0, 256, (2, args.context))
    torch.onnx.export(model, example, args.output, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"},
                                    "logits": {0: "batch"}})
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.output}: context {args.context}, {args.layers} "
          f"layers of width {args.dim}, {params} parameters")


if __name__ == "__main__":
    main()
