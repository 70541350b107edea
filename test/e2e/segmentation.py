"""Per-pixel cross-entropy: a small segmentation network (convolutions,
max pooling, bilinear upsampling back to the image, a 1x1 classifier:
[N, 5, 16, 16] logits) trained with --class-axis=1 and labels [N, 16, 16],
as F.cross_entropy(logits, labels) trains it: a two-stage pipeline
(cpu:0,cpu:1, M = 2, SGD with momentum, 10 steps) against PyTorch with the
same micro-batching, every step's loss within 1e-4 relative and the final
parameters within 1e-4 relative L2 (float32 rounding over 10 steps of a
smooth model: measured 1e-6). A class axis the logits do not have is an
error naming the flag.

usage: segmentation.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_training  # noqa: E402

STEPS, BATCH, SAMPLES, MICRO, CLASSES = 10, 8, 24, 2, 5


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
            nn.Conv2d(8, CLASSES, 1))

    def forward(self, x):
        return self.body(x)


class WithLoss(nn.Module):
    """The module and F.cross_entropy over the pixels, for the replay."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.model(x), y)


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    model = Segmenter()
    onnx_path = os.path.join(work, "segmenter.onnx")
    torch.onnx.export(model.train(), torch.randn(BATCH // MICRO, 3, 16, 16),
                      onnx_path, input_names=["input"],
                      output_names=["logits"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    rng = np.random.RandomState(3)
    x = rng.randn(SAMPLES, 3, 16, 16).astype(np.float32)
    y = rng.randint(0, CLASSES, size=(SAMPLES, 16, 16)).astype(np.int64)
    data = os.path.join(work, "pixels.npz")
    np.savez(data, input=x, labels=y)
    errors = []
    bad = subprocess.run([gpipe_opt, onnx_path, "--mode=train",
                          "--class-axis=4", "-o",
                          os.path.join(work, "bad.gpipe")],
                         capture_output=True, text=True)
    print("class axis 4:", bad.stderr.strip().splitlines()[-1:])
    if bad.returncode == 0 or "--class-axis=4" not in bad.stderr:
        errors.append("--class-axis=4 was not refused by name")
    bundle = os.path.join(work, "segmenter.gpipe")
    proc = subprocess.run(
        [gpipe_opt, onnx_path, "--mode=train", f"--batch-size={BATCH}",
         f"--micro-batches={MICRO}", "--devices=cpu:0,cpu:1",
         "--class-axis=1", "-o", bundle]
        + pytorch_training.OPTIMIZERS["sgd"][0],
        capture_output=True, text=True)
    if proc.returncode != 0:
        print("FAIL compile:", proc.stderr.strip())
        return 1
    params = os.path.join(work, "params")
    got, out = pytorch_training.gpipe_train(
        gpipe_run, bundle, data, STEPS, os.path.join(work, "loss.csv"),
        params)
    if got is None:
        print("FAIL gpipe-run:", out.strip())
        return 1
    want, final = pytorch_training.torch_run(
        WithLoss(model), torch.from_numpy(x), torch.from_numpy(y), MICRO,
        "sgd", loss="output", steps=STEPS, snapshot_at=STEPS, batch=BATCH,
        samples=SAMPLES)
    loss_error = pytorch_training.worst_loss_error(got, want)
    final = {n[len("model."):]: v for n, v in final.items()}
    param_error = pytorch_training.worst_param_error(params, final)
    print(f"per-pixel cross-entropy: loss {got[0]:.4f} -> {got[-1]:.4f} "
          f"(PyTorch {want[0]:.4f} -> {want[-1]:.4f}); worst loss error "
          f"{loss_error:.2e}, worst parameter error {param_error:.2e}")
    if loss_error > 1e-4:
        errors.append(f"loss error {loss_error:.2e} > 1e-4")
    if param_error > 1e-4:
        errors.append(f"parameter error {param_error:.2e} > 1e-4")
    for e in errors:
        print("FAIL", e)
    print("passed" if not errors else "failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
