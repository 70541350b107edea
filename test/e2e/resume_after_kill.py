"""A training run killed with SIGKILL and resumed with --resume ends with
exactly the losses and parameters of an uninterrupted run. The model has
dropout, so the resumed run must also draw the same masks.

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
        if kill_at and line.startswith("epoch") and f"step {kill_at}/" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    return proc.returncode, log, params, lines


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    onnx_path = os.path.join(work, "mlp_dropout.onnx")
    bundle = os.path.join(work, "mlp_dropout.gpipe")
    _, example = reference_models.export("mlp_dropout", onnx_path, batch=16)
    subprocess.run([gpipe_opt, onnx_path, "--mode=train", "--batch-size=32",
                    "--micro-batches=2", "--optimizer=adamw", "--lr=0.001",
                    "-o", bundle], check=True)
    rng = np.random.RandomState(9)
    data = os.path.join(work, "data.npz")
    np.savez(data, input=rng.randn(80, *example.shape[1:]).astype(np.float32),
             labels=rng.randint(0, 10, size=80).astype(np.int64))

    after = None
    rc, log_a, params_a, _ = train(gpipe_run, bundle, data, work, "straight")
    assert rc == 0, "uninterrupted run failed"
    rc, _, _, _ = train(gpipe_run, bundle, data, work, "killed", kill_at=7)
    assert rc == -signal.SIGKILL, f"the run was not killed (exit {rc})"
    rc, log_b, params_b, lines = train(gpipe_run, bundle, data, work, "killed",
                                       resume=True)
    assert rc == 0, "resumed run failed"
    # The kill lands a moment after step 7 is printed: the run resumes from
    # the last even step it checkpointed, whichever that was.
    resumed = [l for l in lines if l.startswith("resumed from")]
    assert resumed, f"did not resume: {lines[:2]}"
    after = int(resumed[0].split("after step ")[1])
    assert 6 <= after < STEPS and after % 2 == 0, resumed[0]
    assert not any(l.startswith("epoch 1  step 1/") for l in lines), \
        "the resumed run started over"

    failures = []
    if open(log_a).read() != open(log_b).read():
        failures.append("loss logs differ:\n" + open(log_a).read() + "vs\n" + open(log_b).read())
    for f in sorted(os.listdir(params_a)):
        a, b = np.load(os.path.join(params_a, f)), np.load(os.path.join(params_b, f))
        if not np.array_equal(a, b):
            failures.append(f"{f}: parameters differ (max {np.abs(a - b).max()})")
    for f in failures:
        print("FAIL", f)
    final = open(log_a).read().strip().splitlines()[-1]
    print(f"killed after step 7, resumed after step {after}; final {final}")
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
