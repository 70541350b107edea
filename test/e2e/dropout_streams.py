"""Dropout in training: masks drawn from (seed, step, micro-batch, stream).

The model's loss is L = mean(dropout(P) * C) + 0 * mean(x), with P a
trainable vector of N ones and C a fixed random vector, so that one SGD step
with lr N and no momentum reveals N dL/dP = mask * C / (1 - ratio). Checked:
- about `ratio` of the elements are dropped, kept ones are scaled exactly;
- the forward used the backward's mask: L == sum(dL/dP * P) at P = 1;
- another step, another micro-batch or another seed draws another mask; the
  same seed draws the same.

usage: dropout_streams.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import csv
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

N, RATIO, BATCH = 4000, 0.3, 4


def build(path):
    rng = np.random.RandomState(3)
    c = rng.uniform(0.5, 1.5, size=N).astype(np.float32)
    nodes = [
        helper.make_node("Dropout", ["P", "ratio", "training"], ["D"]),
        helper.make_node("Mul", ["D", "C"], ["DC"]),
        helper.make_node("ReduceMean", ["DC"], ["S"], keepdims=0),
        helper.make_node("ReduceMean", ["input"], ["XS"], keepdims=0),
        helper.make_node("Mul", ["XS", "zero"], ["X0"]),
        helper.make_node("Add", ["S", "X0"], ["loss"]),
    ]
    inits = [numpy_helper.from_array(np.ones(N, np.float32), "P"),
             numpy_helper.from_array(c, "C"),
             numpy_helper.from_array(np.array(RATIO, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "training"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    graph = helper.make_graph(
        nodes, "dropout_probe",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return c


def train(gpipe_opt, gpipe_run, work, tag, micro, steps, seed):
    onnx_path = os.path.join(work, "probe.onnx")
    bundle = os.path.join(work, f"probe_m{micro}.gpipe")
    if not os.path.exists(bundle):
        subprocess.run([gpipe_opt, onnx_path, "--mode=train",
                        f"--batch-size={BATCH}", f"--micro-batches={micro}",
                        "--loss=output:loss", "--optimizer=sgd", f"--lr={N}",
                        "-o", bundle], check=True)
    data = os.path.join(work, "data.npz")
    np.savez(data, input=np.random.RandomState(0).randn(BATCH, 3).astype(np.float32))
    params, log = os.path.join(work, tag), os.path.join(work, tag + ".csv")
    subprocess.run([gpipe_run, bundle, "--train", f"--data={data}",
                    f"--steps={steps}", "--no-shuffle", f"--seed={seed}",
                    f"--save-params={params}", f"--loss-log={log}"],
                   check=True, capture_output=True)
    with open(log) as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    return np.load(os.path.join(params, "P.npy")), losses


def check(case, gpipe_opt, gpipe_run, work, c):
    errors = []
    scale = np.float32(1.0) / np.float32(1.0 - RATIO)
    if case == "one step":
        p, losses = train(gpipe_opt, gpipe_run, work, "s1", 1, 1, 7)
        grad = 1.0 - p
        kept = grad != 0
        dropped = 1.0 - kept.mean()
        if abs(dropped - RATIO) > 0.03:
            errors.append(f"dropped fraction {dropped:.3f}, ratio {RATIO}")
        if not np.allclose(grad[kept], c[kept] * scale, rtol=1e-5):
            errors.append("kept elements are not scaled by 1/(1-ratio)")
        if abs(losses[0] - grad.sum() / N) > 1e-4 * abs(losses[0]):
            errors.append(f"forward and backward masks differ: loss "
                          f"{losses[0]} vs mean of gradients {grad.sum() / N}")
        print(f"one step: dropped {dropped:.3f} (ratio {RATIO}), loss "
              f"{losses[0]:.5f} = mean of N dL/dP {grad.sum() / N:.5f}")
    elif case == "streams":
        p1, _ = train(gpipe_opt, gpipe_run, work, "a", 1, 1, 7)
        p1b, _ = train(gpipe_opt, gpipe_run, work, "b", 1, 1, 7)
        p1c, _ = train(gpipe_opt, gpipe_run, work, "c", 1, 1, 8)
        p2, _ = train(gpipe_opt, gpipe_run, work, "d", 1, 2, 7)
        if not np.array_equal(p1, p1b):
            errors.append("the same seed drew different masks")
        if np.array_equal(p1 != 1, p1c != 1):
            errors.append("another seed drew the same mask")
        step2 = (p1 - p2) != 0
        if np.array_equal(step2, p1 != 1):
            errors.append("step 2 drew step 1's mask")
        # Two micro-batches, each seeding 1/2: gradients of c*s/2 where only
        # one of them kept an element.
        pm, _ = train(gpipe_opt, gpipe_run, work, "m", 2, 1, 7)
        half = np.isclose(1.0 - pm, c * scale / 2, rtol=1e-5)
        if not 0.3 < half.mean() < 0.5:  # 2 r (1 - r) = 0.42
            errors.append(f"micro-batches share masks: {half.mean():.3f} of "
                          "elements kept by exactly one")
        print(f"streams: kept by one micro-batch of two {half.mean():.3f} "
              f"(expected {2 * RATIO * (1 - RATIO):.2f})")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    c = build(os.path.join(work, "probe.onnx"))
    return reference_models.run_checks(
        [(case, case) for case in ("one step", "streams")],
        lambda case: check(case, gpipe_opt, gpipe_run, work, c))


if __name__ == "__main__":
    sys.exit(main())
