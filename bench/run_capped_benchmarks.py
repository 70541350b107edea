"""Bigger models on more devices: the largest GPT that trains under a
memory limit per rank, for K = 1, 2, 4, 8 ranks (GPipe's Table 1).

Each rank runs one stage (`--devices=r0:cpu:0,...,r{K-1}:cpu:0`, the ranks
oversubscribing this host's cores: memory, not speed, is measured) under a
limit of its own: a memory cgroup per rank (cgroup v1 or v2, as root),
whose limit the kernel enforces by killing the rank. The compiler is told
the same limit (`--memory-per-device`). For each K and each recompute mode
(never; auto: recompute only the stages that need it) the script finds the
most layers the compiler accepts (a GPT of d 512, 8 heads, sequence 64,
vocabulary 4096, batch 8 in 4 micro-batches, tied embeddings), shows one
layer more is refused at compile time, then trains the accepted plan two
steps under the caps and once uncapped: the capped losses must equal the
uncapped ones to the last bit, and every rank's peak (gpipe-run's account)
must stay under the limit.

usage: bench/run_capped_benchmarks.py [--build build]
       [--out docs/capped-benchmarks.md] [--limit-mib 256] [--ranks 1,2,4,8]
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import language_models  # noqa: E402
import run_plan_benchmarks as plans_bench  # noqa: E402
from benchdoc import cpu_name, write_doc, work_dir  # noqa: E402

DIM, HEADS, SEQ, VOCAB, BATCH, MICRO = 512, 8, 64, 4096, 8, 4
ACCOUNT = re.compile(r"memory(?: of rank (\d+))?: process peak ([\d.]+) MiB "
                     r"= stages' plan ([\d.]+) MiB")
LOSS = re.compile(r"^step (\d+)/\d+ .*?loss ([\d.e+-]+)", re.M)


def cgroup_root():
    """The memory controller's directory and its version, or None."""
    if os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") or \
            os.path.isdir("/sys/fs/cgroup/memory"):
        return "/sys/fs/cgroup/memory", 1
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        with open("/sys/fs/cgroup/cgroup.controllers") as f:
            if "memory" in f.read().split():
                return "/sys/fs/cgroup", 2
    return None


def export(layers, work):
    """The GPT of `layers` layers (ONNX, training mode), its data (two
    batches) and its parameter count."""
    count = {}

    def make():
        language_models.SEQ, language_models.VOCAB = SEQ, VOCAB
        model = language_models.GPT(triu=False, dim=DIM, heads=HEADS,
                                    layers=layers)
        count["params"] = sum(p.numel() for p in model.parameters())
        return model, (BATCH, SEQ)

    path, npz, _ = plans_bench.export(f"gpt{layers}", make, work, batches=2)
    return path, npz, count["params"]


def compile_plan(build, onnx, ranks, limit_mib, recompute, bundle):
    devices = ",".join(f"r{r}:cpu:0" for r in range(ranks))
    out = subprocess.run(
        [os.path.join(build, "bin", "gpipe-opt"), onnx, "--mode=train",
         f"--devices={devices}", f"--micro-batches={MICRO}",
         f"--recompute={recompute}", f"--memory-per-device={limit_mib}MiB",
         "--optimizer=sgd", "--lr=0.01", "-o", bundle],
        capture_output=True, text=True)
    return out.returncode == 0, out.stdout + out.stderr


def run(build, bundle, npz, ranks, limit_mib, capped, root):
    """gpipe-run under mpirun, each rank in a memory cgroup of its own when
    `capped`; (return code, output)."""
    run_cmd = (f"{os.path.join(build, 'bin', 'gpipe-run')} {bundle} --train "
               f"--data={npz} --steps=2 --no-shuffle")
    if capped:
        base, version = root
        limit = limit_mib << 20
        if version == 1:
            setup = (f"d={base}/gpipe-cap-$OMPI_COMM_WORLD_RANK; "
                     f"mkdir -p $d; echo {limit} > $d/memory.limit_in_bytes; "
                     f"echo $$ > $d/cgroup.procs; ")
        else:
            setup = (f"d={base}/gpipe-cap-$OMPI_COMM_WORLD_RANK; "
                     f"mkdir -p $d; echo {limit} > $d/memory.max; "
                     f"echo $$ > $d/cgroup.procs; ")
        inner = ["bash", "-c", setup + "exec " + run_cmd]
    else:
        inner = run_cmd.split()
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
           "none", "-np", str(ranks)] + inner
    out = subprocess.run(cmd, capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def cleanup(root, ranks):
    if not root:
        return
    for r in range(ranks):
        path = os.path.join(root[0], f"gpipe-cap-{r}")
        if os.path.isdir(path):
            try:
                os.rmdir(path)
            except OSError:
                pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(
        ROOT, "docs", "capped-benchmarks.md"))
    parser.add_argument("--limit-mib", type=int, default=256)
    parser.add_argument("--ranks", default="1,2,4,8")
    args = parser.parse_args()
    root = cgroup_root()
    if not root or not shutil.which("mpirun"):
        sys.exit("needs mpirun and a writable memory cgroup (run as root)")
    work = work_dir("gpipe-capped-")
    exported = {}

    def model(layers):
        if layers not in exported:
            exported[layers] = export(layers, work)
        return exported[layers]

    rows, notes = [], []
    ranks_list = [int(k) for k in args.ranks.split(",")]
    for recompute in ("never", "auto"):
        guess, base = 1, None
        for k in ranks_list:
            compiled = {}

            def accepts(layers):
                """Whether the compiler accepts `layers` (cached, with its
                output and bundle)."""
                if layers not in compiled:
                    bundle = os.path.join(work, f"k{k}-{recompute}-{layers}"
                                          ".gpipe")
                    ok, out = compile_plan(args.build, model(layers)[0], k,
                                           args.limit_mib, recompute, bundle)
                    compiled[layers] = (ok, out, bundle)
                    print(f"K={k} {recompute} {layers} layers: "
                          f"{'accepted' if ok else 'refused'}", flush=True)
                return compiled[layers][0]

            # The most layers the compiler accepts: up from the guess while
            # it accepts, down while it refuses.
            n = max(1, guess)
            if accepts(n):
                while accepts(n + 1):
                    n += 1
            else:
                while n > 1 and not accepts(n - 1):
                    n -= 1
                n -= 1
            if n < 1 or not accepts(n):
                rows.append(f"| {k} | {recompute} | none | | | | | |")
                continue
            accepts(n + 1)
            _, table, bundle = compiled[n]
            refusal = re.search(r"error: (.*)", compiled[n + 1][1])
            plan = [float(x) for x in re.findall(r" ([\d.]+) MiB$", table,
                                                 re.M)]
            recomputing = re.search(r"recompute auto: (.*)", table)
            cleanup(root, k)
            npz = model(n)[1]
            rc, capped = run(args.build, bundle, npz, k, args.limit_mib,
                             True, root)
            cleanup(root, k)
            _, free = run(args.build, bundle, npz, k, args.limit_mib, False,
                          None)
            peaks = [float(m.group(2)) for m in ACCOUNT.finditer(capped)]
            same = (rc == 0 and LOSS.findall(capped) == LOSS.findall(free)
                    and len(LOSS.findall(free)) == 2)
            params = model(n)[2]
            base = base or params
            rows.append(
                f"| {k} | {recompute} | {n} | {params / 1e6:.1f} | "
                f"{params / base:.2f} | "
                f"{max(plan) if plan else float('nan'):.0f} | "
                f"{max(peaks) if peaks else float('nan'):.0f} | "
                + ("yes" if same else f"**no** (rc {rc})") + " |")
            print(rows[-1], flush=True)
            if refusal:
                notes.append(f"- K = {k}, {recompute}, {n + 1} layers: "
                             f"`{refusal.group(1)[:400]}`")
            if recomputing:
                notes.append(f"- K = {k}, auto, {n} layers: "
                             f"{recomputing.group(1)}")
            # Twice the ranks: about twice the layers, less the embedding
            # and head that the first and last stages hold.
            guess = max(1, (9 * n) // 5)
    lines = [
        "# Bigger models on more devices: GPTs under a memory limit per "
        "rank",
        "",
        f"Generated by `bench/run_capped_benchmarks.py` on "
        f"{datetime.date.today()} ({cpu_name()}, {os.cpu_count()} cores). "
        f"Each rank runs one stage under a memory cgroup of "
        f"{args.limit_mib} MiB, and the compiler is told the same "
        f"(`--memory-per-device={args.limit_mib}MiB`, of which 64 MiB and "
        "1/32 are kept for the runtime: 72 MiB). The model: a GPT of d 512 (8 heads, "
        f"sequence {SEQ}, vocabulary {VOCAB}, tied embeddings), batch "
        f"{BATCH} in {MICRO} micro-batches, SGD; the layers are the most "
        "the compiler accepts (one more is refused at compile time, below). "
        "\"Equal\": the capped run (two steps, no rank killed) gives the "
        "uncapped run's losses to the last bit. See "
        "[memory.md](memory.md).",
        "",
        "| ranks K | recompute | layers | parameters (M) | x K=1 | largest "
        "stage plan MiB | largest rank peak MiB | equal, not killed |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "One layer more, refused at compile time; which stages auto "
        "recomputes:",
        "",
        *notes,
        "",
    ]
    write_doc(args.out, lines)


if __name__ == "__main__":
    main()
