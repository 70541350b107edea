"""A training run killed with SIGKILL and resumed with --resume ends with
exactly the losses and parameters of an uninterrupted run. The model has
dropout, so the resumed run must also draw the same masks. Checked on one
stage and on a two-stage pipeline (1F1B, a dropout on each stage), whose
uninterrupted run must also equal the one-stage run exactly: dropout masks
do not depend on the cut, and with two micro-batches the gradient sum does
not depend on the order.

usage: resume_after_kill.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import os
import shutil
import signal
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models  # noqa: E402

STEPS = 300


def train(gpipe_run, bundle, data, work, name, kill_at=None, resume=False):
    ckpt = os.path.join(work, name + "_ckpt")
    params = os.path.join(work, name + "_params")
    log = os.path.join(work, name + ".csv")
    args = [gpipe_run, bundle, "--train", f"--data={data}", f"--steps={STEPS}",
            "--seed=3", f"--checkpoint-dir={ckpt}", "--checkpoint-every=2",
            f"--loss-log={log}", f"--save-params={params}"]
    if resume:
        args.append("--resume")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if kill_at and line.startswith(f"step {kill_at}/"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    return proc.returncode, log, params, lines


def check(gpipe_opt, gpipe_run, work, name, flags):
    """Returns the failures of one bundle's kill-and-resume."""
    work = os.path.join(work, name)
    os.makedirs(work)
    onnx_path = os.path.join(work, "mlp_dropout.onnx")
    bundle = os.path.join(work, "mlp_dropout.gpipe")
    _, example = reference_models.export("mlp_dropout", onnx_path, batch=16)
    subprocess.run([gpipe_opt, onnx_path, "--mode=train", "--batch-size=32",
                    "--micro-batches=2", "--optimizer=adamw", "--lr=0.001",
                    "-o", bundle] + flags, check=True, stdout=subprocess.DEVNULL)
    rng = np.random.RandomState(9)
    data = os.path.join(work, "data.npz")
    np.savez(data, input=rng.randn(80, *example.shape[1:]).astype(np.float32),
             labels=rng.randint(0, 10, size=80).astype(np.int64))

    rc, log_a, params_a, _ = train(gpipe_run, bundle, data, work, "straight")
    if rc != 0:
        return ["uninterrupted run failed"], None, None
    rc, _, _, _ = train(gpipe_run, bundle, data, work, "killed", kill_at=7)
    if rc != -signal.SIGKILL:
        return [f"the run was not killed (exit {rc})"], None, None
    rc, log_b, params_b, lines = train(gpipe_run, bundle, data, work, "killed",
                                       resume=True)
    if rc != 0:
        return ["resumed run failed"], None, None
    # The kill lands a moment after step 7 is printed: the run resumes from
    # the last even step it checkpointed, whichever that was.
    resumed = [l for l in lines if l.startswith("resumed from")]
    if not resumed:
        return [f"did not resume: {lines[:2]}"], None, None
    after = int(resumed[0].split("after step ")[1])
    failures = []
    if not (6 <= after < STEPS and after % 2 == 0):
        failures.append(resumed[0])
    if any(l.startswith("step 1/") for l in lines):
        failures.append("the resumed run started over")
    if open(log_a).read() != open(log_b).read():
        failures.append("loss logs differ:\n" + open(log_a).read() + "vs\n" +
                        open(log_b).read())
    for f in sorted(os.listdir(params_a)):
        a, b = np.load(os.path.join(params_a, f)), np.load(os.path.join(params_b, f))
        if not np.array_equal(a, b):
            failures.append(f"{f}: parameters differ (max {np.abs(a - b).max()})")
    final = open(log_a).read().strip().splitlines()[-1]
    print(f"{name}: killed after step 7, resumed after step {after}; "
          f"final {final}")
    return failures, log_a, params_a


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cases = [("one-stage", []),
             ("pipeline", ["--devices=cpu:0,cpu:1", "--schedule=1f1b",
                           "--stages=manual:4"])]
    failed = 0
    runs = []
    for name, flags in cases:
        failures, log, params = check(gpipe_opt, gpipe_run, work, name, flags)
        runs.append((log, params))
        for f in failures:
            print(f"FAIL {name}: {f}")
        failed += bool(failures)
    (log_1, params_1), (log_2, params_2) = runs
    same = log_1 and log_2 and open(log_1).read() == open(log_2).read() and all(
        np.array_equal(np.load(os.path.join(params_1, f)),
                       np.load(os.path.join(params_2, f)))
        for f in os.listdir(params_1))
    if not same:
        print("FAIL the pipeline's run differs from the one-stage run")
        failed += 1
    print(f"{len(cases) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
