"""Pipelined inference: an inference bundle of several stages
(`gpipe-opt --mode=infer --devices=cpu:0,cpu:1`) streams micro-batches
through its stages and gives the outputs of the same model as one stage.

For models written with torch.nn and torchvision and exported as users do
(training mode, so dropout and BatchNorm must take their inference
behaviour; the GPT with `dynamic_axes` and compiled with --batch-size):
compiled as one stage and as two stages (one model as three, two of them
on one core; two models also on two MPI ranks under mpirun), run with gpipe-run --infer on random inputs of 2.5 compiled
batches plus one row (a last, partial micro-batch) and of exactly one
batch.

What is asserted, and why:
  * The pipeline's outputs within 1e-6 relative (L2) of one stage's. Both
    run the same kernels on the same values; they differ only in how many
    threads each kernel splits its sums over (one stage runs on both
    cores, a pipeline stage on one), which reorders float32 additions: an
    error of a few units in the last place (2^-24 = 6e-8) per layer, well
    under 1e-6 for these depths (measured on a 2-core Xeon: identical,
    the small kernels there split no sums).
  * Both within 1e-4 relative of PyTorch eval(), the bound of the inference
    suite (pytorch_inference.py).
  * gpipe-opt prints the pipeline's predicted pace beside one stage's.

usage: pipelined_inference.py GPIPE_OPT GPIPE_RUN WORK_DIR [MODEL...]
"""
import os
import re
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import language_models  # noqa: E402
import reference_models  # noqa: E402

AGAINST_ONE_STAGE = 1e-6
AGAINST_PYTORCH = 1e-4

# name: the pipelines' --devices lists
MODELS = {
    "mlp_dropout": ["cpu:0,cpu:1"],
    "cnn_bn": ["cpu:0,cpu:1", "cpu:0,cpu:1,cpu:1"],
    "cnn_upsample": ["cpu:0,cpu:1"],
    "unet_transpose": ["cpu:0,cpu:1"],
    "resnet18": ["cpu:0,cpu:1", "r0:cpu:0,r1:cpu:1"],
    "transformer": ["cpu:0,cpu:1"],
    "gpt": ["cpu:0,cpu:1", "r0:cpu:0,r1:cpu:1"],
}
GPT_BATCH = 4
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def export(name, path):
    """(model in eval mode, example input, input name, output name,
    gpipe-opt flags of the import)."""
    if name != "gpt":
        model, x = reference_models.export(name, path)
        return model.eval(), x, "input", "logits", []
    torch.manual_seed(0)
    model = language_models.GPT(triu=False)
    x = torch.randint(0, language_models.VOCAB, (GPT_BATCH, language_models.SEQ))
    model.train()
    torch.onnx.export(model, x, path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["idx"],
                      output_names=["logits"],
                      dynamic_axes={"idx": {0: "batch"},
                                    "logits": {0: "batch"}})
    return model.eval(), x, "idx", "logits", [f"--batch-size={GPT_BATCH}"]


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return proc.stdout


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def check(name, gpipe_opt, gpipe_run, work):
    onnx_path = os.path.join(work, name + ".onnx")
    model, example, in_name, out_name, flags = export(name, onnx_path)
    bundles = {"one stage": os.path.join(work, name + "_1.gpipe")}
    run([gpipe_opt, onnx_path, *flags, "-o", bundles["one stage"]])
    errors = []
    for devices in MODELS[name]:
        ranks = "r1:" in devices
        bundle = os.path.join(work, f"{name}_{devices.count(',') + 1}"
                              f"{'_ranks' if ranks else ''}.gpipe")
        out = run([gpipe_opt, onnx_path, *flags, "--mode=infer",
                   f"--devices={devices}", "-o", bundle])
        if not re.search(r"predicted: a micro-batch every [0-9.e+-]+ ms", out) \
                or not (ranks or re.search(r"predicted: one stage on cpu:0-1",
                                           out)):
            errors.append(f"{devices}: no predicted pace printed:\n{out}")
        bundles[devices] = bundle
    rng = np.random.RandomState(1)
    batch = example.shape[0]
    for rows in (batch * 5 // 2 + 1, batch):
        if example.dtype == torch.int64:
            x = rng.randint(0, language_models.VOCAB,
                            (rows, *example.shape[1:])).astype(np.int64)
        else:
            x = rng.randn(rows, *example.shape[1:]).astype(np.float32)
        x_path = os.path.join(work, f"{name}_{rows}.npy")
        np.save(x_path, x)
        with torch.no_grad():
            ref = model(torch.from_numpy(x)).numpy()
        got = {}
        for label, bundle in bundles.items():
            out_dir = os.path.join(work, f"{name}_{rows}_{len(got)}_out")
            launch = MPIRUN if "r1:" in label else []
            run(launch + [gpipe_run, bundle, "--infer",
                          f"--input={in_name}={x_path}", "--output", out_dir])
            got[label] = np.load(os.path.join(out_dir, out_name + ".npy"))
            if got[label].shape != ref.shape:
                errors.append(f"{label}, {rows} rows: shape "
                              f"{got[label].shape} != PyTorch {ref.shape}")
                return errors
        one = got["one stage"]
        e = rel(one, ref)
        print(f"{name}: {rows} rows, one stage against PyTorch {e:.1e}")
        if not e < AGAINST_PYTORCH:
            errors.append(f"one stage, {rows} rows: {e:.2e} from PyTorch")
        for label, out in got.items():
            if label == "one stage":
                continue
            e1, e2 = rel(out, one), rel(out, ref)
            print(f"{name}: {rows} rows, {label}: against one stage {e1:.1e},"
                  f" against PyTorch {e2:.1e}")
            if not e1 <= AGAINST_ONE_STAGE:
                errors.append(f"{label}, {rows} rows: {e1:.2e} from one stage")
            if not e2 < AGAINST_PYTORCH:
                errors.append(f"{label}, {rows} rows: {e2:.2e} from PyTorch")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    names = sys.argv[4:] or list(MODELS)
    os.makedirs(work, exist_ok=True)
    return reference_models.run_checks(
        [(name, name) for name in names],
        lambda name: check(name, gpipe_opt, gpipe_run, work))


if __name__ == "__main__":
    sys.exit(main())
