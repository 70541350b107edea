"""matmul_weights.textproto's output and one SGD step, against NumPy in
float64: within 1e-5 relative of the largest value (float32 rounding over
sums of at most 6 terms).

usage: check_matmul_weights.py model.textproto data.npz y.npy params_dir
"""
import re
import sys

import numpy as np

text = open(sys.argv[1]).read()
weights = {}
for name, dims, data in re.findall(
        r'initializer \{ name: "(\w+)" data_type: 1 ((?:dims: \d+ )+)(.*?) \}',
        text):
    shape = [int(d) for d in re.findall(r"\d+", dims)]
    values = [float(v) for v in re.findall(r"float_data: (\S+)", data)]
    weights[name] = np.array(values, dtype=np.float32).astype(
        np.float64).reshape(shape)
data = np.load(sys.argv[2])
x = data["x"].astype(np.float64)
labels = data["labels"].astype(np.float64)
w1, w2 = weights["w1"], weights["w2"]


def close(name, got, want):
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"{name}: {'ok' if err < 1e-5 else f'off by {err:.2e}'}")
    return err < 1e-5


h = x @ w1
a = np.maximum(h, 0)
y = a @ w2
ok = close("inference", np.load(sys.argv[3]), y)
# Mean squared error over every element, SGD with lr 0.5.
g = 2 * (y - labels) / y.size
dw2 = a.reshape(-1, 6).T @ g.reshape(-1, 5)
da = g @ w2.T
dw1 = x.reshape(-1, 4).T @ (da * (h > 0)).reshape(-1, 6)
for name, w, dw in (("w1", w1, dw1), ("w2", w2, dw2)):
    got = np.load(f"{sys.argv[4]}/{name}.npy")
    ok &= close(f"{name} after one step", got, w - 0.5 * dw)
sys.exit(0 if ok else 1)
