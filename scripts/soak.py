#!/usr/bin/env python3
"""Soak: trains over MPI for a long time while killing a random rank at
random moments and resuming, and checks that every training that reaches
its last step has the loss log and the parameters of an uninterrupted run,
to the bit. Not in CI (docs/testing.md reports a one-hour run).

A training: an MLP with dropout on each of two stages (so the random
streams of dropout must resume exactly too) as a 1F1B pipeline of two MPI
ranks, M = 4, Adam, a checkpoint every 2 steps. A cycle: `mpirun -np 2
gpipe-run --train --resume ...`, then, after a random time (0.3 to 6 s,
which lands during steps, checkpoint writes, start-up or shut-down),
SIGKILL of a random rank; every rank must be gone within 30 s, with a
non-zero exit. A run that ends by itself is a completed training: its log
and parameters are compared with the reference; then the next training
starts from scratch.

    scripts/soak.py [--seconds 3600] [--work DIR] [--steps 1500]
        [--gpipe-opt build/bin/gpipe-opt] [--gpipe-run build/bin/gpipe-run]
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "test", "e2e"))
import reference_models  # noqa: E402
from mpi_pipeline import MPIRUN, committed_step, rank_pids  # noqa: E402


def same_params(a, b):
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        np.array_equal(np.load(os.path.join(a, n)), np.load(os.path.join(b, n)))
        for n in names)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3600)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--work", default="/tmp/gpipe-soak")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gpipe-opt", default=os.path.join(root, "build/bin/gpipe-opt"))
    p.add_argument("--gpipe-run", default=os.path.join(root, "build/bin/gpipe-run"))
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    onnx_path = os.path.join(a.work, "mlp.onnx")
    _, example = reference_models.export("mlp_dropout", onnx_path, batch=4)
    rng = np.random.RandomState(5)
    data = os.path.join(a.work, "data.npz")
    np.savez(data, input=rng.randn(96, *example.shape[1:]).astype(np.float32),
             labels=rng.randint(0, 10, 96).astype(np.int64))
    bundle = os.path.join(a.work, "mlp.gpipe")
    subprocess.run([a.gpipe_opt, onnx_path, "--mode=train",
                    "--devices=r0:cpu:0,r1:cpu:1", "--batch-size=16",
                    "--micro-batches=4", "--schedule=1f1b", "--optimizer=adam",
                    "--lr=0.001", "-o", bundle], check=True,
                   stdout=subprocess.DEVNULL)
    train = [a.gpipe_run, bundle, "--train", f"--data={data}",
             f"--steps={a.steps}", "--seed=3"]
    ref_log = os.path.join(a.work, "reference.csv")
    ref_params = os.path.join(a.work, "reference_params")
    t0 = time.time()
    subprocess.run(MPIRUN + ["-np", "2"] + train +
                   [f"--loss-log={ref_log}", f"--save-params={ref_params}"],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"reference: {a.steps} steps in {time.time() - t0:.1f} s",
          flush=True)
    pick = random.Random(a.seed)
    start = time.time()
    trainings = cycles = kills = mismatches = 0
    slowest_exit = 0.0
    while time.time() - start < a.seconds:
        trainings += 1
        run_dir = os.path.join(a.work, "run")
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        ck, log, params = (os.path.join(run_dir, n)
                           for n in ("ck", "loss.csv", "params"))
        resume = train + [f"--checkpoint-dir={ck}", "--checkpoint-every=2",
                          f"--loss-log={log}", f"--save-params={params}",
                          "--resume"]
        while True:
            cycles += 1
            proc = subprocess.Popen(MPIRUN + ["-np", "2"] + resume,
                                    stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            try:
                out, _ = proc.communicate(timeout=pick.uniform(0.3, 6.0))
                done = True
            except subprocess.TimeoutExpired:
                done = False
            if not done:
                # The ranks (mpirun may still be starting them, or they may
                # be ending: then the run goes on without a kill).
                ranks = {}
                for _ in range(50):
                    ranks = rank_pids(proc)
                    if len(ranks) == 2 or proc.poll() is not None:
                        break
                    time.sleep(0.1)
                if not ranks:
                    out, _ = proc.communicate()
                    done = True
            if not done:
                victim = pick.choice(sorted(ranks))
                at = committed_step(ck)
                try:
                    os.kill(ranks[victim], signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass  # it had just ended
                killed = time.time()
                try:
                    out, _ = proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    print(f"FAIL: rank {victim} killed after step {at}: the "
                          "job still runs 30 s later")
                    return 1
                slowest_exit = max(slowest_exit, time.time() - killed)
                if proc.returncode == 0:
                    # It finished before the kill landed.
                    done = True
            if done:
                if proc.returncode != 0:
                    print(f"FAIL: a run exited {proc.returncode}:\n"
                          f"{out[-2000:]}")
                    return 1
                break
        same = (open(log).read() == open(ref_log).read() and
                same_params(params, ref_params))
        mismatches += not same
        print(f"training {trainings}: {cycles} cycles and {kills} kills so "
              f"far, {'bit-identical' if same else 'DIFFERENT'} to the "
              f"reference ({time.time() - start:.0f} s)", flush=True)
        if not same:
            shutil.copytree(run_dir, os.path.join(a.work,
                                                  f"different_{trainings}"))
    print(f"soak: {time.time() - start:.0f} s, {trainings} trainings of "
          f"{a.steps} steps, {cycles} runs, {kills} ranks killed, slowest "
          f"exit after a kill {slowest_exit:.1f} s, {mismatches} differing "
          "from the uninterrupted run")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
