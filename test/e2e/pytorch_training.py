"""Training equivalence with PyTorch: the same model (same initial weights,
read from the same PyTorch module), the same data, the same optimizer and
the same micro-batch gradient accumulation give the same losses and final
parameters.

For each (model, micro-batches, optimizer): export, compile with
--mode=train, run 20 steps (SGD with momentum, or AdamW with weight decay)
with `gpipe-run --train --no-shuffle`, and replay them in PyTorch. Every step's loss must agree within 1e-4 relative
and the final parameters within 1e-3 relative L2.

usage: pytorch_training.py GPIPE_OPT GPIPE_RUN WORK_DIR [ONLY]
(ONLY: run the cases whose label contains this text)
"""
import csv
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

STEPS, BATCH, SAMPLES = 20, 32, 96
# AdamW runs at lr 3e-4 (a usual Adam rate): at several times that, these
# tiny models overfit 96 samples within 20 steps and float32 rounding
# differences between any two implementations grow by an order of magnitude
# every few steps, and Adam turns near-zero gradients into full steps of
# either sign.
OPTIMIZERS = {
    "sgd": (["--optimizer=sgd", "--lr=0.05", "--momentum=0.9"],
            lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)),
    "adamw": (["--optimizer=adamw", "--lr=0.0003", "--weight-decay=0.01"],
              lambda params: torch.optim.AdamW(params, lr=0.0003, weight_decay=0.01)),
    # Attention's key bias has a gradient of exactly zero (softmax ignores a
    # constant added to a row), so both runs see only float32 rounding noise
    # there (~1e-10), which Adam with eps 1e-8 turns into steps of either
    # sign; eps 1e-6 keeps noise small steps while every real gradient of
    # the model is orders of magnitude larger.
    "adamw-eps1e-6": (["--optimizer=adamw", "--lr=0.0003", "--weight-decay=0.01",
                       "--eps=1e-6"],
                      lambda params: torch.optim.AdamW(
                          params, lr=0.0003, weight_decay=0.01, eps=1e-6)),
}
CASES = [(m, micro, o, "cross-entropy") for o in ("sgd", "adamw")
         for m in ("mlp", "cnn") for micro in (1, 4)]
CASES.append(("mlp", 2, "sgd", "mse"))
CASES.append(("cnn_avgpool", 2, "sgd", "cross-entropy"))
# A conv + BatchNorm (batch statistics) + ReLU + linear model.
CASES.append(("cnn_bn", 2, "sgd", "cross-entropy"))
CASES += [("transformer_no_dropout", micro, o, "cross-entropy")
          for o in ("sgd", "adamw-eps1e-6") for micro in (1, 4)]


def torch_run(model, x, y, micro, optimizer, loss="cross-entropy"):
    opt = OPTIMIZERS[optimizer][1](model.parameters())
    loss_fn = torch.nn.MSELoss() if loss == "mse" else torch.nn.CrossEntropyLoss()
    losses = []
    for step in range(STEPS):
        rows = [(step * BATCH + r) % SAMPLES for r in range(BATCH)]
        xb, yb = x[rows], y[rows]
        opt.zero_grad()
        total = 0.0
        for xc, yc in zip(xb.chunk(micro), yb.chunk(micro)):
            loss = loss_fn(model(xc), yc)
            (loss / micro).backward()
            total += loss.item() / micro
        opt.step()
        losses.append(total)
    return losses


def check(name, micro, optimizer, loss, gpipe_opt, gpipe_run, work):
    tag = f"{name}_m{micro}_{optimizer}_{loss}"
    onnx_path = os.path.join(work, tag + ".onnx")
    bundle = os.path.join(work, tag + ".gpipe")
    model, example = reference_models.export(name, onnx_path,
                                             batch=BATCH // micro)
    proc = subprocess.run(
        [gpipe_opt, onnx_path, "--mode=train", f"--batch-size={BATCH}",
         f"--micro-batches={micro}", f"--loss={loss}"] + OPTIMIZERS[optimizer][0]
        + ["-o", bundle],
        capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"compile failed: {proc.stderr.strip()}"]
    rng = np.random.RandomState(5)
    x = rng.randn(SAMPLES, *example.shape[1:]).astype(np.float32)
    y = (rng.randn(SAMPLES, 10).astype(np.float32) if loss == "mse"
         else rng.randint(0, 10, size=SAMPLES).astype(np.int64))
    data = os.path.join(work, tag + ".npz")
    np.savez(data, input=x, labels=y)
    log = os.path.join(work, tag + ".csv")
    params = os.path.join(work, tag + "_params")
    proc = subprocess.run(
        [gpipe_run, bundle, "--train", f"--data={data}", f"--steps={STEPS}",
         "--no-shuffle", f"--loss-log={log}", f"--save-params={params}",
         f"--save-onnx={os.path.join(work, tag + '_trained.onnx')}"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"gpipe-run failed: {proc.stderr.strip()}"]
    with open(log) as f:
        got = [float(r["loss"]) for r in csv.DictReader(f)]
    model.train()
    expected = torch_run(model, torch.from_numpy(x), torch.from_numpy(y), micro,
                         optimizer, loss)
    errors = []
    worst = max(abs(g - e) / abs(e) for g, e in zip(got, expected))
    if len(got) != STEPS or worst > 1e-4:
        errors.append(f"losses differ (worst relative {worst:.2e}): "
                      f"{got[:3]}... vs {expected[:3]}...")
    worst_param = 0.0
    for pname, tensor in model.named_parameters():
        mine = np.load(os.path.join(params, pname + ".npy"))
        ref = tensor.detach().numpy()
        rel = float(np.linalg.norm(mine - ref) / np.linalg.norm(ref))
        worst_param = max(worst_param, rel)
    if worst_param > 1e-3:
        errors.append(f"final parameters differ: relative L2 {worst_param:.2e}")
    # --save-onnx: a valid ONNX model holding the trained parameters.
    trained = onnx.load(os.path.join(work, tag + "_trained.onnx"))
    onnx.checker.check_model(trained)
    inits = {t.name: numpy_helper.to_array(t) for t in trained.graph.initializer}
    for pname, _ in model.named_parameters():
        if not np.array_equal(inits.get(pname), np.load(os.path.join(params, pname + ".npy"))):
            errors.append(f"--save-onnx: initializer {pname} is not the trained value")
    print(f"{tag}: {STEPS} steps, loss {got[0]:.4f} -> {got[-1]:.4f}, worst "
          f"loss error {worst:.2e}, worst parameter error {worst_param:.2e}")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    only = sys.argv[4] if len(sys.argv) > 4 else ""
    os.makedirs(work, exist_ok=True)
    return reference_models.run_checks(
        [(f"{name} M={micro} {optimizer} {loss}", case)
         for case in CASES for name, micro, optimizer, loss in [case]
         if only in f"{name} M={micro} {optimizer} {loss}"],
        lambda case: check(*case, gpipe_opt, gpipe_run, work))


if __name__ == "__main__":
    sys.exit(main())
