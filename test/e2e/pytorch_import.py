"""End-to-end import of PyTorch-exported models.

For each reference model (reference_models.py): export with Debian's
PyTorch (opset 17, training mode, no constant folding), import with
`gpipe-opt --emit=nn`, parse the printed IR back, and compare against
PyTorch:
  * every trainable parameter is a trainable gpipe.parameter of the same
    name and shape, and nothing else is trainable;
  * BatchNorm running statistics are non-trainable parameters;
  * op counts match the layers PyTorch ran (counted with forward hooks on
    the modules, plus the products MultiheadAttention computes
    functionally: input projection, Q.K^T, attention.V, output projection);
  * the parameter values survive: the dense resource blob of each
    parameter holds PyTorch's tensor bit for bit.

usage: pytorch_import.py GPIPE_OPT WORK_DIR [MODEL...]
"""
import collections
import os
import re
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

PARAM_RE = re.compile(
    r'^\s*gpipe\.parameter @("(?:[^"\\]|\\.)*"|[\w.$]+)( trainable)? = '
    r'dense_resource<([\w.$]+)> : tensor<([0-9x]*)x?f32>', re.M)
OP_RE = re.compile(r"= nn\.(\w+)")
BLOB_RE = re.compile(r'^\s*([\w.$]+): "0x([0-9A-F]+)"', re.M)


def run_hooks(model, x):
    """Counts forward calls per module type (leaf modules only)."""
    counts = collections.Counter()
    handles = [m.register_forward_hook(
        lambda mod, inp, out: counts.update([type(mod).__name__]))
        for m in model.modules() if not list(m.children())]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return counts


def expected_ops(model, x):
    calls = run_hooks(model, x)
    mha = sum(isinstance(m, torch.nn.MultiheadAttention) for m in model.modules())
    linear = calls["Linear"] + 4 * mha
    expected = {
        "conv": calls["Conv2d"],
        "batch_norm": calls["BatchNorm2d"],
        "max_pool": calls["MaxPool2d"],
        "global_avg_pool": calls["AdaptiveAvgPool2d"],
        "layer_norm": calls["LayerNorm"],
        "softmax": mha,
        "dropout": calls["Dropout"] + mha,
        "relu": calls["ReLU"],
    }
    return expected, linear


def parse_ir(text):
    params = {}
    for m in PARAM_RE.finditer(text):
        name = m.group(1)
        if name.startswith('"'):
            name = name[1:-1]
        shape = tuple(int(d) for d in m.group(4).split("x") if d) if m.group(4) else ()
        params[name] = (bool(m.group(2)), shape, m.group(3))
    ops = collections.Counter(OP_RE.findall(text))
    blobs = dict(BLOB_RE.findall(text))
    return params, ops, blobs


def check_model(name, gpipe_opt, work):
    onnx_path = os.path.join(work, name + ".onnx")
    mlir_path = os.path.join(work, name + ".mlir")
    model, x = reference_models.export(name, onnx_path)
    proc = subprocess.run([gpipe_opt, onnx_path, "--emit=nn", "-o", mlir_path],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"import failed: {proc.stderr.strip()}"]
    back = subprocess.run([gpipe_opt, mlir_path, "-o", os.devnull],
                          capture_output=True, text=True)
    errors = []
    if back.returncode != 0:
        errors.append(f"--emit=nn output does not parse back: {back.stderr.strip()}")
    params, ops, blobs = parse_ir(open(mlir_path).read())

    torch_params = dict(model.named_parameters())
    trainable = {n for n, (t, _, _) in params.items() if t}
    if trainable != set(torch_params):
        errors.append(f"trainable parameters differ: only in gpipe "
                      f"{sorted(trainable - set(torch_params))}, only in PyTorch "
                      f"{sorted(set(torch_params) - trainable)}")
    for pname, tensor in torch_params.items():
        if pname not in params:
            continue
        _, shape, blob = params[pname]
        if shape != tuple(tensor.shape):
            errors.append(f"{pname}: shape {shape} != PyTorch {tuple(tensor.shape)}")
            continue
        data = bytes.fromhex(blobs.get(blob, "")[8:])  # skip the alignment word
        expected = tensor.detach().numpy().astype("<f4").tobytes()
        if data != expected:
            errors.append(f"{pname}: parameter bytes differ from PyTorch")
    for bname, buf in model.named_buffers():
        if bname.endswith(("running_mean", "running_var")):
            entry = params.get(bname)
            if not entry or entry[0] or entry[1] != tuple(buf.shape):
                errors.append(f"{bname}: expected a non-trainable parameter of "
                              f"shape {tuple(buf.shape)}, got {entry}")

    expected, linear = expected_ops(model, x)
    for op, count in expected.items():
        if ops.get(op, 0) != count:
            errors.append(f"nn.{op}: {ops.get(op, 0)} ops, PyTorch ran {count}")
    products = ops.get("gemm", 0) + ops.get("matmul", 0)
    if products != linear:
        errors.append(f"nn.gemm + nn.matmul: {products}, PyTorch computed {linear}")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
    print(f"{name}: {len(trainable)} trainable parameters, {len(params) - len(trainable)} "
          f"other; ops: {summary}")
    return errors


def main():
    gpipe_opt, work = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or list(reference_models.MODELS)
    os.makedirs(work, exist_ok=True)
    return reference_models.run_checks(
        [(name, name) for name in names],
        lambda name: check_model(name, gpipe_opt, work))


if __name__ == "__main__":
    sys.exit(main())
