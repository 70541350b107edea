"""Prints the memory a stage's plan counts in float32 and bfloat16, and
their difference, for a model exported from PyTorch (test/tools/gpipe-opt/
bf16-weight-copies.test says what is expected).

    bf16_copies.py GPIPE_OPT WORK_DIR {mlp,cnn}
"""
import os
import re
import subprocess
import sys

import torch

gpipe_opt, work, kind = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
torch.manual_seed(0)
if kind == "mlp":
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    example = torch.randn(8, 512)
else:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(128, 128, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(128 * 4 * 4, 10))
    example = torch.randn(2, 64, 4, 4)
onnx = os.path.join(work, kind + ".onnx")
torch.onnx.export(model, example, onnx, opset_version=17,
                  input_names=["x"], output_names=["y"])


def mib(text):
    value, unit = text.split()
    return float(value) / (1024 if unit == "KiB" else 1)


def plans(precision):
    """The partitioner's figure (its error at a device too small) and the
    compiled stage's peak (the stage table), in MiB."""
    common = [gpipe_opt, onnx, "--mode=train", "--precision=" + precision]
    small = subprocess.run(common + ["--memory-per-device=70000000", "-o",
                                     os.path.join(work, "x.gpipe")],
                           capture_output=True, text=True)
    partition = mib(re.search(r"needs ([0-9.]+ [KM]iB)",
                              small.stderr).group(1))
    table = subprocess.run(common + ["-o", os.path.join(
        work, kind + "_" + precision + ".gpipe")],
        capture_output=True, text=True, check=True).stdout
    row = table.splitlines()[table.splitlines().index(
        next(l for l in table.splitlines() if "peak memory" in l)) + 1]
    peak = mib(" ".join(row.split()[-2:]))
    return partition, peak


(p32, s32), (p16, s16) = plans("fp32"), plans("bf16")
# The copies, worked by hand (bf16-weight-copies.test), each figure
# printed to 0.1 MiB: the difference within 0.1 of them.
copies = {"mlp": (512 * 512 + 512 * 10) * 2,
          "cnn": (64 * 128 * 9 + 2 * 128 * 128 * 9 + 2048 * 10) * 2}[kind]
expected = copies / 1048576.0
for what, grown in (("partition", p16 - p32), ("stage", s16 - s32)):
    ok = abs(grown - expected) <= 0.1
    print("%s %s: +%.2f MiB in bfloat16, the copies %.2f MiB" % (
        "PASS" if ok else "FAIL", what, grown, expected))
print("%s: partition %.1f -> %.1f MiB (+%.2f), stage %.1f -> %.1f MiB (+%.2f)"
      % (kind, p32, p16, p16 - p32, s32, s16, s16 - s32))
