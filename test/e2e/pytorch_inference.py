"""End-to-end inference: compile each reference model to a bundle, run it
with gpipe-run --infer and compare with PyTorch in eval() mode.

Every model gets random inputs (fixed seed) of its compiled batch and, to
exercise micro-batching, of 2.5 times that batch. The outputs must match
PyTorch's with a relative L2 error below 1e-4.

usage: pytorch_inference.py GPIPE_OPT GPIPE_RUN WORK_DIR [MODEL...]
"""
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

TOLERANCE = 1e-4


def check(name, gpipe_opt, gpipe_run, work):
    onnx_path = os.path.join(work, name + ".onnx")
    bundle = os.path.join(work, name + ".gpipe")
    model, example = reference_models.export(name, onnx_path)
    model.eval()
    proc = subprocess.run([gpipe_opt, onnx_path, "-o", bundle],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"compile failed: {proc.stderr.strip()}"]
    errors = []
    rng = np.random.RandomState(1)
    batch = example.shape[0]
    for rows in (batch, batch * 5 // 2):
        x = rng.randn(rows, *example.shape[1:]).astype(np.float32)
        x_path = os.path.join(work, f"{name}_{rows}.npy")
        out_dir = os.path.join(work, f"{name}_{rows}_out")
        np.save(x_path, x)
        proc = subprocess.run([gpipe_run, bundle, "--infer",
                               f"--input=input={x_path}", "--output", out_dir],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            errors.append(f"{rows} rows: gpipe-run failed: {proc.stderr.strip()}")
            continue
        got = np.load(os.path.join(out_dir, "logits.npy"))
        with torch.no_grad():
            ref = model(torch.from_numpy(x)).numpy()
        if got.shape != ref.shape:
            errors.append(f"{rows} rows: shape {got.shape} != PyTorch {ref.shape}")
            continue
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        print(f"{name}: {rows} rows, relative L2 error {err:.2e}")
        if not err < TOLERANCE:
            errors.append(f"{rows} rows: relative L2 error {err:.2e} >= {TOLERANCE}")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    names = sys.argv[4:] or list(reference_models.MODELS)
    os.makedirs(work, exist_ok=True)
    return reference_models.run_checks(
        [(name, name) for name in names],
        lambda name: check(name, gpipe_opt, gpipe_run, work))


if __name__ == "__main__":
    sys.exit(main())
