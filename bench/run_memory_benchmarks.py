"""The process's memory against the memory plan, on the benchmark models.

Each model (the plan benchmarks' eight, the language-model benchmarks'
6-layer GPT and GPT-2-small, the end-to-end model zoo's single-input models
at its batch of 8, and the other end-to-end suites' models: first_update's
five torchvision networks, segmentation's and sequence_first's
TransformerModel) is compiled as a two-stage pipeline on the
two cores (cpu:0,cpu:1; 8 micro-batches, 4 where the batch is 8) with
--recompute=never and =always and trained a few steps; gpipe-run's summary
gives each process's peak resident memory (VmHWM) part by part: the stages'
plan (the compiler's predicted peaks: arenas, parameters, stash, messages,
tied gradients' host copies), the kernels' buffers
(converted parameters, their workspace), the data, the process before
loading the stages, and "other" (what none of those names). Some models run
again over two MPI ranks (r0:cpu:0,r1:cpu:1), each rank's account printed
by rank 0. The table sets the peak against its parts (docs/memory.md: within
the larger of 32 MiB and 10%) and recompute's measured saving against the
plan's (at least 80%); /usr/bin/time's maximum resident set of gpipe-run
(one process) checks the summary's peak.

usage: bench/run_memory_benchmarks.py [--build build]
       [--out docs/memory-benchmarks.md] [--only NAME] [--steps N]
"""
import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import model_zoo  # noqa: E402
import run_language_model_benchmarks as lm_bench  # noqa: E402
import run_plan_benchmarks as plans_bench  # noqa: E402
from parameter_training import export as zoo_export  # noqa: E402
from benchdoc import cpu_name, write_doc, work_dir  # noqa: E402

ACCOUNT = re.compile(
    r"memory(?: of rank (\d+))?: process peak ([\d.]+) MiB = stages' plan "
    r"([\d.]+) MiB \+ kernels' buffers ([\d.]+) MiB \+ data ([\d.]+) MiB "
    r"\+ the process before loading ([\d.]+) MiB \+ other (-?[\d.]+) MiB")
PARTS = ("peak", "plan", "kernels", "data", "start", "other")
# Recompute's saving is judged where the plan saves at least this much: the
# other parts of a model's peak move by up to 1.3 MiB between its two runs
# (MobileNet V2's "other" 19.9 and 21.2 MiB in one run of this script), so
# a smaller saving is within their noise.
JUDGED_MIB = 4.0
# Models also run over two MPI ranks.
ON_RANKS = ("ResNet-18 32x32", "GPT 4x256, seq 64", "GPT 6x384, seq 128")


def gpt_6x384():
    model = lm_bench.gpt_6x384()
    return model, (8, lm_bench.SMALL_SEQ)


def gpt2_small():
    model = lm_bench.gpt2_small()
    return model, (lm_bench.BATCH, lm_bench.SEQ)


MODELS = dict(plans_bench.MODELS)
MODELS["GPT 6x384, seq 128"] = gpt_6x384
MODELS["GPT-2-small, seq 256"] = gpt2_small


def export_zoo(name, work):
    """A model of the end-to-end model zoo (test/e2e/model_zoo.py), exported
    as that suite exports it (static batch), with the suite's data."""
    build, draw, _, _ = model_zoo.MODELS[name]
    torch.manual_seed(0)
    model = build()
    x, y = draw(np.random.RandomState(0))
    path = os.path.join(work, "zoo_" + name + ".onnx")
    zoo_export(model, torch.from_numpy(x[:model_zoo.BATCH]), path,
               dynamic=False)
    npz = path[:-5] + ".npz"
    np.savez(npz, input=x, labels=y)
    return path, npz, model_zoo.BATCH


def export_torch(name, model, inputs, labels, work, flags=()):
    """`model` exported in training mode at the batch of `inputs` (one
    array, or a dict by input name), with `labels` as its data set (a
    batch's worth, repeated); `flags` for gpipe-opt."""
    arrays = inputs if isinstance(inputs, dict) else {"input": inputs}
    path = os.path.join(work, name + ".onnx")
    example = tuple(torch.from_numpy(a) for a in arrays.values())
    torch.onnx.export(model.train(), example, path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=list(arrays),
                      output_names=["output"])
    npz = path[:-5] + ".npz"
    np.savez(npz, labels=labels, **arrays)
    return path, npz, next(iter(arrays.values())).shape[0], list(flags)


def e2e_models():
    """The other end-to-end suites' models: first_update.py's torchvision
    networks at its input sizes (batch 8), segmentation.py's network (its
    [N, C, H, W] logits, --class-axis=1) and sequence_first.py's
    word_language_model TransformerModel ([T, N] tokens, --batch-axis=1)."""
    import first_update
    import segmentation
    import sequence_first
    made = {}
    rng = np.random.RandomState(0)
    for name, (make, shape, classes) in first_update.models().items():
        def exported(work, name=name, make=make, shape=shape,
                     classes=classes):
            torch.manual_seed(0)
            x = rng.randn(8, *shape[1:]).astype(np.float32)
            return export_torch(name, first_update.no_dropout(make()), x,
                                rng.randint(0, classes, 8), work)
        made[f"e2e: {name}"] = exported

    def segmenter(work):
        torch.manual_seed(0)
        x = rng.randn(8, 3, 16, 16).astype(np.float32)
        y = rng.randint(0, segmentation.CLASSES, (8, 16, 16))
        return export_torch("segmenter", segmentation.Segmenter(), x, y,
                            work, ["--class-axis=1"])
    made["e2e: segmentation network"] = segmenter

    def transformer_model(work):
        torch.manual_seed(0)
        vocab, seq = sequence_first.VOCAB, sequence_first.SEQ
        model = sequence_first.without_dropout(
            sequence_first.TransformerModel(vocab, 32, 4, 64, 2))
        tokens = rng.randint(0, vocab, (seq, 8))
        return export_torch("word_lm_transformer", model, {"src": tokens},
                            rng.randint(0, vocab, (seq, 8)), work,
                            ["--batch-axis=1"])
    made["e2e: word_language_model TransformerModel"] = transformer_model
    return made


def run(build, onnx, npz, batch, recompute, ranks, steps, work, flags=()):
    """{rank: account} and /usr/bin/time's peak (MiB; one process only)."""
    micro = 8 if batch % 8 == 0 and batch > 8 else 4
    devices = "r0:cpu:0,r1:cpu:1" if ranks > 1 else "cpu:0,cpu:1"
    bundle = os.path.join(work, "m.gpipe")
    subprocess.run([os.path.join(build, "bin", "gpipe-opt"), onnx,
                    "--mode=train", f"--devices={devices}",
                    f"--micro-batches={micro}", f"--recompute={recompute}",
                    "-o", bundle] + list(flags), check=True,
                   capture_output=True)
    cmd = [os.path.join(build, "bin", "gpipe-run"), bundle, "--train",
           f"--data={npz}", f"--steps={steps}"]
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
               str(ranks)] + cmd
    else:
        cmd = ["/usr/bin/time", "-f", "MAXRSS %M"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(" ".join(cmd) + " failed:\n" + out.stderr[-3000:])
    found = {}
    for m in ACCOUNT.finditer(out.stdout):
        found[int(m.group(1) or 0)] = dict(
            zip(PARTS, (float(v) for v in m.groups()[1:])))
    rss = re.search(r"MAXRSS (\d+)", out.stderr)
    return found, (int(rss.group(1)) / 1024 if rss else None), micro


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--out", default=os.path.join(
        ROOT, "docs", "memory-benchmarks.md"))
    parser.add_argument("--only", help="models whose name contains this")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-zoo", action="store_true",
                        help="leave out the end-to-end suites' models")
    args = parser.parse_args()
    # The built Python module: test/e2e's first_update and sequence_first
    # import it (only their models are used here).
    sys.path.insert(0, os.path.join(args.build, "python"))
    work = work_dir("gpipe-memory-bench-")
    rows, savings, worst = [], [], 0.0
    runs = [(name, lambda n=name, m=make: plans_bench.export(n, m, work, batches=2))
            for name, make in MODELS.items()]
    if not args.no_zoo:
        runs += [(f"zoo: {name}", lambda n=name: export_zoo(n, work))
                 for name in model_zoo.MODELS
                 if not isinstance(model_zoo.MODELS[name][1](
                     np.random.RandomState(0))[0], (tuple, dict))]
        runs += [(name, lambda m=make: m(work))
                 for name, make in e2e_models().items()]
    for name, exported in runs:
        if args.only and args.only not in name:
            continue
        onnx, npz, batch, *flags = exported()
        flags = flags[0] if flags else []
        ranks_list = [1] + ([2] if name in ON_RANKS and shutil.which(
            "mpirun") else [])
        for ranks in ranks_list:
            peaks = {}
            for recompute in ("never", "always"):
                found, rss, micro = run(args.build, onnx, npz, batch,
                                        recompute, ranks, args.steps, work,
                                        flags)
                for rank, a in sorted(found.items()):
                    parts = a["peak"] - a["other"]
                    bound = max(32.0, 0.1 * a["peak"])
                    worst = max(worst, abs(a["other"]) / bound)
                    where = (f"rank {rank} of 2" if ranks > 1 else
                             "one process")
                    rows.append(
                        f"| {name} | {where} | M={micro}, {recompute} | "
                        f"{a['plan']:.1f} | {a['kernels']:.1f} | "
                        f"{a['data']:.1f} | {a['start']:.1f} | "
                        f"{a['other']:.1f} | **{a['peak']:.1f}** | "
                        f"{a['peak'] / parts:.3f} | "
                        + ("yes" if abs(a["other"]) <= bound else "**no**")
                        + (f" | {rss:.1f}" if rss and ranks == 1 else " | ")
                        + " |")
                    peaks[(rank, recompute)] = a
                    print(rows[-1], flush=True)
            for rank in sorted({r for r, _ in peaks}):
                never, always = peaks.get((rank, "never")), peaks.get(
                    (rank, "always"))
                if not never or not always:
                    continue
                planned = never["plan"] - always["plan"]
                measured = never["peak"] - always["peak"]
                where = f"rank {rank} of 2" if ranks > 1 else "one process"
                share = measured / planned if planned > 0 else float("nan")
                judged = ("n/a (under 4 MiB)" if planned < JUDGED_MIB else
                          "yes" if share >= 0.8 else "**no**")
                savings.append(
                    f"| {name} | {where} | {planned:.1f} | {measured:.1f} | "
                    f"{share:.2f} | {judged} |")
                print(savings[-1], flush=True)
    lines = [
        "# Memory benchmarks: the process against the plan",
        "",
        f"Generated by `bench/run_memory_benchmarks.py` on "
        f"{datetime.date.today()} ({cpu_name()}, {os.cpu_count()} cores); "
        f"{args.steps} training steps a run. How to read it: "
        "[memory.md](memory.md).",
        "",
        "Each run's account as gpipe-run's summary prints it (MiB): the "
        "stages' plan (the compiler's predicted peaks: arenas, parameters, "
        "stash, messages, tied gradients' host copies), the "
        "kernels' buffers (parameters in oneDNN's layouts, the workspace "
        "their kernels share), the data set held, the process before it "
        "loaded the stages, and other (the rest of the peak: threads' "
        "stacks, libraries' code and caches, the allocator's free lists). "
        "\"Within\": other "
        "is at most the larger of 32 MiB and 10% of the peak. The last "
        "column is /usr/bin/time's maximum resident set of the same run "
        "(one process), which the summary's peak should equal.",
        "",
        "| model | process | micro-batches, recompute | stages' plan | "
        "kernels' buffers | data | before loading | other | peak | "
        "peak / parts | within | /usr/bin/time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Worst |other| against its bound: {worst:.2f} of it.",
        "",
        "Recompute's saving: the plan's (never - always) against the "
        "measured peaks' (at least 80% of it asked), judged where the plan "
        f"saves at least {JUDGED_MIB:.0f} MiB (the other parts of a model's "
        "peak move by up to about 1.3 MiB between two runs).",
        "",
        "| model | process | planned saving MiB | measured MiB | share | "
        "at least 0.8 |",
        "|---|---|---|---|---|---|",
        *savings,
        "",
    ]
    write_doc(args.out, lines)


if __name__ == "__main__":
    main()
