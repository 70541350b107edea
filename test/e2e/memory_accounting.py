"""The process's memory against the memory plan: gpipe-run's summary puts
each process's peak (VmHWM) beside the stages' plan (the compiler's
predicted peaks), the kernels' buffers,
the data and what the process held before loading the stages; what none of
those names ("other": threads, libraries' code and caches) stays within
the larger of 32 MiB and 10% of the peak, and recomputing lowers the peak
by at least 80% of what it lowers the plan by (the memory issue's bounds:
docs/memory.md argues them). Two-stage pipelines of torchvision's
ResNet-18 (convolutions: weights converted to oneDNN's layouts, patches
in the kernels' workspace) and a GPT (attention, layer norms), each with
--recompute=never and =always; the GPT's pipeline again over two MPI
ranks, where rank 0 prints both ranks' accounts.

    memory_accounting.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import language_models  # noqa: E402

gpipe_opt, gpipe_run, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
failures = []
MIB = 1 << 20
ACCOUNT = re.compile(
    r"memory(?: of rank (\d+))?: process peak ([\d.]+) MiB = stages' plan "
    r"([\d.]+) MiB \+ kernels' buffers ([\d.]+) MiB \+ data ([\d.]+) MiB "
    r"\+ the process before loading ([\d.]+) MiB \+ other (-?[\d.]+) MiB")


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        failures.append(name)


def export(name, model, example, tokens):
    model.train()
    path = os.path.join(work, name + ".onnx")
    torch.onnx.export(model, example, path, opset_version=17,
                      input_names=["input"], output_names=["output"],
                      do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    rng = np.random.RandomState(0)
    rows = 2 * example.shape[0]
    if tokens:
        data = {"input": rng.randint(0, language_models.VOCAB,
                                     (rows,) + tuple(example.shape[1:])),
                "labels": rng.randint(0, language_models.VOCAB,
                                      (rows,) + tuple(example.shape[1:]))}
    else:
        data = {"input": rng.randn(rows, *example.shape[1:]).astype(
            np.float32), "labels": rng.randint(0, 10, rows)}
    npz = os.path.join(work, name + ".npz")
    np.savez(npz, **data)
    return path, npz


def accounts(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + out.stderr[-2000:])
    found = {}
    for m in ACCOUNT.finditer(out.stdout):
        values = [float(v) for v in m.groups()[1:]]
        found[int(m.group(1) or 0)] = dict(zip(
            ("peak", "plan", "kernels", "data", "start", "other"), values))
    return found


def train(onnx, npz, devices, micro, recompute, tag, mpi_ranks=0):
    bundle = os.path.join(work, tag + ".gpipe")
    subprocess.run([gpipe_opt, onnx, "--mode=train", f"--devices={devices}",
                    f"--micro-batches={micro}", f"--recompute={recompute}",
                    "-o", bundle], check=True, capture_output=True)
    cmd = [gpipe_run, bundle, "--train", f"--data={npz}", "--steps=3"]
    if mpi_ranks:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
               str(mpi_ranks)] + cmd
    return accounts(cmd)


def check_other(tag, found, ranks):
    check(f"{tag}: an account for each of its {ranks} process(es)",
          sorted(found) == list(range(ranks)), str(found))
    for rank, a in found.items():
        bound = max(32.0, 0.1 * a["peak"])
        total = a["plan"] + a["kernels"] + a["data"] + a["start"]
        check(f"{tag}, rank {rank}: the peak {a['peak']} MiB within "
              f"{bound:.1f} MiB of its parts ({total:.1f} MiB)",
              abs(a["other"]) <= bound and abs(a["peak"] - total - a["other"])
              < 0.5, str(a))


def check_model(name, onnx, npz, micro):
    runs = {}
    for recompute in ("never", "always"):
        tag = f"{name} recompute={recompute}"
        found = train(onnx, npz, "cpu:0,cpu:1", micro, recompute,
                      f"{name}-{recompute}")
        check_other(tag, found, 1)
        runs[recompute] = found.get(0)
    never, always = runs["never"], runs["always"]
    if never and always:
        planned = never["plan"] - always["plan"]
        measured = never["peak"] - always["peak"]
        check(f"{name}: recompute lowers the peak by {measured:.1f} MiB, at "
              f"least 80% of the plan's {planned:.1f} MiB",
              planned > 0 and measured >= 0.8 * planned,
              f"never {never}, always {always}")


def main():
    torch.manual_seed(0)
    resnet, resnet_path = torchvision.models.resnet18(num_classes=10), None
    resnet_path, resnet_npz = export("resnet18", resnet,
                                     torch.randn(16, 3, 32, 32), False)
    check_model("ResNet-18", resnet_path, resnet_npz, 4)

    language_models.SEQ, language_models.VOCAB = 64, 512
    torch.manual_seed(0)
    gpt = language_models.GPT(triu=False, dim=256, heads=4, layers=4)
    gpt_path, gpt_npz = export(
        "gpt", gpt, torch.randint(0, 512, (8, 64)), True)
    check_model("GPT", gpt_path, gpt_npz, 4)

    if shutil.which("mpirun"):
        found = train(gpt_path, gpt_npz, "r0:cpu:0,r1:cpu:1", 4, "never",
                      "gpt-ranks", mpi_ranks=2)
        check_other("GPT on two MPI ranks", found, 2)
    else:
        print("SKIP: no mpirun (the accounts of two ranks)")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
