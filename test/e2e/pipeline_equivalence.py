"""Pipelining changes nothing but speed: for K devices, M micro-batches, the
gpipe, 1f1b, zb-h1, interleaved-1f1b or zb-v schedule and every recompute
mode,
training gives the losses
and final parameters of the same model trained on one device with M=1
(models with BatchNorm: against one device with the same M and schedule,
since each micro-batch normalizes with its own statistics and the schedule
decides the order in which the micro-batches' gradients are summed).

Devices may outnumber the cores (cpu:0,cpu:1,cpu:0,cpu:1). MLP runs the full
matrix K in {1,2,3,4} x M in {1,2,4,8} x {gpipe, 1f1b, zb-h1} x {never,
always, except-last}; the larger models a covering subset in which every K,
every M, every schedule and every recompute mode occur (compiling each
configuration of ResNet-18 and the Transformer takes seconds). The
interleaved schedule runs four stages on the two devices in turns (K=4 over
cpu:0,cpu:1,cpu:0,cpu:1, M a multiple of 2): the MLP at M in {2,4,8} with
every recompute mode, each larger model at one or three of those. ZB-V runs
four stages on the two devices as a V (cpu:0,cpu:1,cpu:1,cpu:0): the MLP at
M in {1,2,4,8} with every recompute mode, each larger model at one or three
of those.

Tolerances: every step's loss within 1e-5 relative of the reference and
every final parameter tensor within 1e-4 relative L2 (the micro-batches'
gradients are summed in another order when M or the schedule differ: 1f1b
adds them first to last, gpipe last to first; for the same M and schedule
the runs are bit-identical in practice). With BatchNorm the parameters are
compared as one vector (relative L2 over all tensors, 1e-4) and the per-tensor
worst is printed: the BatchNorm biases start at zero and their gradients are
sums of large terms of both signs. ResNet-18 is also ill-conditioned enough
that the summation order alone matters: one device, M=8, 1f1b against gpipe
differ by 1.6e-4 over all parameters after two steps (1.3e-2 on a BatchNorm
bias of norm 2e-3), exactly as much as four devices with 1f1b do; hence its
reference uses the same schedule.

With GPIPE_FULL_MATRIX=1 in the environment every model runs the full
matrix (576 configurations; about 50 minutes on two cores, too long for CI);
with GPIPE_COVERING=N every model runs the same N covering configurations.

usage: pipeline_equivalence.py GPIPE_OPT GPIPE_RUN WORK_DIR [ONLY]
"""
import csv
import itertools
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

BATCH, SAMPLES = 32, 64
DEVICES = {1: "cpu:0", 2: "cpu:0,cpu:1", 3: "cpu:0,cpu:1,cpu:0",
           4: "cpu:0,cpu:1,cpu:0,cpu:1"}
SCHEDULES = ("gpipe", "1f1b", "zb-h1")
RECOMPUTE = ("never", "always", "except-last")
LOSS_TOLERANCE, PARAM_TOLERANCE = 1e-5, 1e-4


def covering(count):
    """`count` configurations covering every K, M, schedule and recompute
    (every pair of schedule and recompute mode from 9 on)."""
    ks, ms = (1, 2, 3, 4), (1, 2, 4, 8)
    return [(ks[i % 4], ms[(i // 4 + i) % 4], SCHEDULES[(i + i // 3) % 3],
             RECOMPUTE[i % 3]) for i in range(count)]


FULL = list(itertools.product((1, 2, 3, 4), (1, 2, 4, 8), SCHEDULES,
                              RECOMPUTE))
if os.environ.get("GPIPE_FULL_MATRIX") == "1":
    covering = lambda count: FULL  # noqa: E731
# GPIPE_COVERING=N: every model (the MLP too) runs covering(N), still every
# K, M, schedule and recompute mode for N >= 6 (the sanitizer runs take 6).
if os.environ.get("GPIPE_COVERING"):
    FULL = covering(int(os.environ["GPIPE_COVERING"]))
    covering = lambda count: FULL  # noqa: E731

# Interleaved 1F1B: K=4 stages, two on each device (DEVICES[4]), M a
# multiple of the two devices.
INTERLEAVED = "interleaved-1f1b"
INTERLEAVED_CONFIGS = {
    "mlp": [(4, m, INTERLEAVED, r) for m in (2, 4, 8) for r in RECOMPUTE],
    "cnn": [(4, 2, INTERLEAVED, "never"), (4, 4, INTERLEAVED, "always"),
            (4, 8, INTERLEAVED, "except-last")],
    "transformer_no_dropout": [(4, 4, INTERLEAVED, "always")],
    "resnet18": [(4, 2, INTERLEAVED, "never")],
}
# ZB-V: K=4 stages, two on each device laid out as a V (V_DEVICES).
ZBV = "zb-v"
V_DEVICES = "cpu:0,cpu:1,cpu:1,cpu:0"
for name, configs in {
        "mlp": [(4, m, ZBV, r) for m in (1, 2, 4, 8) for r in RECOMPUTE],
        "cnn": [(4, 1, ZBV, "always"), (4, 4, ZBV, "never"),
                (4, 8, ZBV, "except-last")],
        "transformer_no_dropout": [(4, 2, ZBV, "never")],
        "resnet18": [(4, 4, ZBV, "except-last")]}.items():
    INTERLEAVED_CONFIGS[name] += configs
if os.environ.get("GPIPE_COVERING"):
    INTERLEAVED_CONFIGS = {name: [(4, 4, INTERLEAVED, "never"),
                                  (4, 4, ZBV, "never")]
                           for name in INTERLEAVED_CONFIGS}

# model -> (steps, batch norm, optimizer flags, configurations)
MODELS = {
    "mlp": (4, False, ["--optimizer=sgd", "--lr=0.05", "--momentum=0.9"],
            FULL + INTERLEAVED_CONFIGS["mlp"]),
    "cnn": (3, False, ["--optimizer=adamw", "--lr=0.001"],
            covering(16) + INTERLEAVED_CONFIGS["cnn"]),
    "transformer_no_dropout": (3, False, ["--optimizer=sgd", "--lr=0.05",
                                          "--momentum=0.9"],
                               covering(8) +
                               INTERLEAVED_CONFIGS["transformer_no_dropout"]),
    "resnet18": (2, True, ["--optimizer=sgd", "--lr=0.01", "--momentum=0.9"],
                 covering(6) + INTERLEAVED_CONFIGS["resnet18"]),
}


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


class Runner:
    def __init__(self, gpipe_opt, gpipe_run, work):
        self.opt, self.run, self.work = gpipe_opt, gpipe_run, work
        self.exports = {}

    def export(self, name, micro):
        # Attention reshapes fix the micro-batch size in the exported graph.
        key = (name, micro if name.startswith("transformer") else 0)
        if key not in self.exports:
            path = os.path.join(self.work, f"{name}_{key[1]}.onnx")
            _, example = reference_models.export(name, path,
                                                 batch=BATCH // micro)
            self.exports[key] = (path, example)
        return self.exports[key]

    def data(self, name, example):
        path = os.path.join(self.work, name + ".npz")
        if not os.path.exists(path):
            rng = np.random.RandomState(11)
            np.savez(path,
                     input=rng.randn(SAMPLES, *example.shape[1:]).astype(
                         np.float32),
                     labels=rng.randint(0, 10, size=SAMPLES).astype(np.int64))
        return path

    def train(self, name, config, steps, flags):
        k, m, schedule, recompute = config
        tag = f"{name}_k{k}_m{m}_{schedule}_{recompute}"
        onnx_path, example = self.export(name, m)
        bundle = os.path.join(self.work, tag + ".gpipe")
        rc, out = run([self.opt, onnx_path, "--mode=train",
                       f"--devices={V_DEVICES if schedule == ZBV else DEVICES[k]}",
                       f"--batch-size={BATCH}",
                       f"--micro-batches={m}", f"--schedule={schedule}",
                       f"--recompute={recompute}", "-o", bundle] + flags)
        if rc != 0:
            return None, f"compile failed: {out.strip()}"
        log = os.path.join(self.work, tag + ".csv")
        params = os.path.join(self.work, tag + "_params")
        rc, out = run([self.run, bundle, "--train",
                       f"--data={self.data(name, example)}",
                       f"--steps={steps}", "--no-shuffle",
                       f"--loss-log={log}", f"--save-params={params}"])
        if rc != 0:
            return None, f"gpipe-run failed: {out.strip()}"
        with open(log) as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        values = {n[:-4]: np.load(os.path.join(params, n))
                  for n in os.listdir(params)}
        self.outputs = (bundle, params)
        return (losses, values), ""

    def discard_outputs(self):
        """The last run's bundle and parameters, once read and compared (a
        ResNet-18 bundle is 130 MB, and the suite trains 40 of them),
        unless GPIPE_KEEP_OUTPUTS=1 (scripts/compare-training-runs.sh
        compares two builds' parameters). A failed case's stay."""
        if os.environ.get("GPIPE_KEEP_OUTPUTS") != "1":
            for path in self.outputs:
                shutil.rmtree(path, ignore_errors=True)


def compare(got, ref, batch_norm):
    losses, params = got
    ref_losses, ref_params = ref
    errors = []
    if len(losses) != len(ref_losses):
        return [f"{len(losses)} losses, expected {len(ref_losses)}"]
    loss_err = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    if loss_err > LOSS_TOLERANCE:
        errors.append(f"loss error {loss_err:.2e}: {losses} vs {ref_losses}")
    if set(params) != set(ref_params):
        return errors + ["different parameter sets"]
    param_err = max(float(np.linalg.norm(params[n] - ref_params[n]) /
                          max(np.linalg.norm(ref_params[n]), 1e-30))
                    for n in params)
    diff = np.sqrt(sum(float(np.sum((params[n] - ref_params[n]) ** 2))
                       for n in params))
    norm = np.sqrt(sum(float(np.sum(ref_params[n] ** 2)) for n in params))
    global_err = diff / norm
    checked = global_err if batch_norm else param_err
    if checked > PARAM_TOLERANCE:
        errors.append(f"parameter error {checked:.2e}")
    return errors, loss_err, param_err, global_err


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    only = sys.argv[4] if len(sys.argv) > 4 else ""
    os.makedirs(work, exist_ok=True)
    runner = Runner(gpipe_opt, gpipe_run, work)
    passed = failed = 0
    worst = {}
    for name, (steps, batch_norm, flags, configs) in MODELS.items():
        if only and only not in name:
            continue
        refs = {}
        for config in configs:
            k, m, schedule, recompute = config
            # One device cannot interleave; its micro-batches' gradients
            # are summed in 1f1b's order (first to last on every stage).
            ref_key = ((1, m, "1f1b" if schedule in (INTERLEAVED, ZBV)
                        else schedule, "never") if batch_norm
                       else (1, 1, "gpipe", "never"))
            label = f"{name} K={k} M={m} {schedule} recompute={recompute}"
            if ref_key not in refs:
                refs[ref_key], why = runner.train(name, ref_key, steps, flags)
                if refs[ref_key] is None:
                    print(f"FAIL {name} reference {ref_key}: {why}")
                else:
                    runner.discard_outputs()  # compared from memory
            ref = refs[ref_key]
            got, why = runner.train(name, config, steps, flags)
            if ref is None or got is None:
                failed += 1
                print(f"FAIL {label}: {why or 'no reference'}")
                continue
            result = compare(got, ref, batch_norm)
            if isinstance(result, list):
                errors = result
            else:
                errors, loss_err, param_err, global_err = result
                w = worst.setdefault(name, [0.0, 0.0, 0.0])
                w[0], w[1] = max(w[0], loss_err), max(w[1], param_err)
                w[2] = max(w[2], global_err)
            for e in errors:
                print(f"FAIL {label}: {e}")
            if not errors:
                runner.discard_outputs()
            failed += bool(errors)
            passed += not errors
    for name, (loss_err, param_err, global_err) in worst.items():
        print(f"{name}: worst loss error {loss_err:.1e}, worst parameter "
              f"tensor error {param_err:.1e}, all parameters {global_err:.1e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
