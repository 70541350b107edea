"""bfloat16 training (gpipe-opt --precision=bf16) against PyTorch's
torch.autocast("cpu", dtype=torch.bfloat16), in a two-stage pipeline
(cpu:0,cpu:1) with the same micro-batching (M = 2).

For an MLP, a CNN with BatchNorm, ResNet-18, a TransformerEncoder and a
GPT (models written with torch.nn and torchvision, exported as users do):
the same initial weights and data train STEPS steps in four runs: gpipe
bf16, PyTorch float32 (the reference), PyTorch autocast bf16, and, for the
first step, gpipe fp32.

What is asserted, and why:
  * The first step's loss of gpipe bf16 within 1e-2 relative of autocast's.
    Both round the products' operands to bfloat16 (8 bits of mantissa,
    relative error at most 2^-9 = 2e-3 each); a loss is a mean of
    log-softmaxes over the batch, in which those errors average; 1e-2 is
    five times one operand's worst rounding.
  * Over STEPS steps, gpipe bf16's distance from the float32 reference (the
    relative L2 distance of all final parameters) at most 2x autocast
    bf16's own distance from it. The two runs perturb float32 training by
    rounding the same operands (gpipe keeps the products' results, and
    normalizations and softmax that autocast runs in bfloat16 where their
    inputs are, in float32: it rounds less), and those perturbations then
    grow with the training's own sensitivity, which is the same for both
    (docs/training.md: float32 chaos). Twice autocast's distance is the
    margin for the chance in which direction each run drifts.
  * And at least a tenth of it: gpipe bf16 does round (a run in float32
    throughout is 1e-6 or less from the reference here, three orders below
    any bfloat16 run), so the test fails if --precision=bf16 did nothing.

usage: mixed_precision.py GPIPE_OPT GPIPE_RUN WORK_DIR [ONLY]
"""
import csv
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import language_models  # noqa: E402  (its GPT)
import reference_models  # noqa: E402
from pytorch_training import OPTIMIZERS  # noqa: E402

STEPS, BATCH, MICRO, SAMPLES = 50, 16, 2, 64
FIRST_LOSS_TOLERANCE = 1e-2
DRIFT_AT_MOST, DRIFT_AT_LEAST = 2.0, 0.1


def gpt():
    torch.manual_seed(0)
    model = language_models.GPT(triu=False)
    return model, torch.randint(0, language_models.VOCAB,
                                (8, language_models.SEQ))


# name: (builder, optimizer of pytorch_training.OPTIMIZERS)
MODELS = {
    "mlp": (reference_models.mlp, "sgd"),
    "cnn_bn": (reference_models.cnn_bn, "sgd"),
    "resnet18": (reference_models.resnet18, "sgd-lr0.01"),
    "transformer": (reference_models.transformer_no_dropout, "sgd"),
    "gpt": (gpt, "sgd"),
}


def data_for(name, example):
    rng = np.random.RandomState(11)
    if name == "gpt":
        seq, vocab = language_models.SEQ, language_models.VOCAB
        tokens = rng.randint(0, vocab, size=(SAMPLES, seq + 1)).astype(np.int64)
        return tokens[:, :-1].copy(), tokens[:, 1:].copy()
    x = rng.randn(SAMPLES, *example.shape[1:]).astype(np.float32)
    return x, rng.randint(0, 10, size=SAMPLES).astype(np.int64)


def torch_train(model, x, y, optimizer, autocast, steps=STEPS):
    """Losses and final parameters of `steps` steps as gpipe-run
    --no-shuffle takes them (rows k*BATCH.. of the data, MICRO micro-batches
    whose gradients add up); `autocast`: under torch.autocast bf16."""
    opt = OPTIMIZERS[optimizer][1](model.parameters())
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    losses = []
    for step in range(steps):
        rows = [(step * BATCH + r) % SAMPLES for r in range(BATCH)]
        opt.zero_grad()
        total = 0.0
        for xc, yc in zip(x[rows].chunk(MICRO), y[rows].chunk(MICRO)):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(xc)
            out = out.float()
            loss = torch.nn.functional.cross_entropy(
                out.reshape(-1, out.shape[-1]), yc.reshape(-1))
            (loss / MICRO).backward()
            total += loss.item() / MICRO
        opt.step()
        losses.append(total)
    return losses, {n: p.detach().double().numpy().copy()
                    for n, p in model.named_parameters()}


def gpipe(gpipe_opt, gpipe_run, onnx_path, data, precision, optimizer, steps,
          work, tag):
    """Losses and the saved parameters' directory, or (None, error)."""
    bundle = os.path.join(work, f"{tag}_{precision}.gpipe")
    compile_ = subprocess.run(
        [gpipe_opt, onnx_path, "--mode=train", f"--batch-size={BATCH}",
         f"--micro-batches={MICRO}", "--devices=cpu:0,cpu:1",
         f"--precision={precision}"] + OPTIMIZERS[optimizer][0]
        + ["-o", bundle], capture_output=True, text=True)
    if compile_.returncode != 0:
        return None, f"compile ({precision}) failed: {compile_.stderr.strip()}"
    if precision == "bf16" and "products of matrices in bfloat16" not in \
            compile_.stdout:
        return None, "the compile's report does not say bf16:\n" + \
            compile_.stdout
    log = os.path.join(work, f"{tag}_{precision}.csv")
    params = os.path.join(work, f"{tag}_{precision}_params")
    run = subprocess.run(
        [gpipe_run, bundle, "--train", f"--data={data}", f"--steps={steps}",
         "--no-shuffle", f"--loss-log={log}", f"--save-params={params}"],
        capture_output=True, text=True)
    if run.returncode != 0:
        return None, f"gpipe-run ({precision}) failed: {run.stderr.strip()}"
    with open(log) as f:
        return [float(r["loss"]) for r in csv.DictReader(f)], params


def distance(params, reference):
    """Relative L2 distance of all parameters from the reference's."""
    diff = sum(float(np.sum((params[n] - r) ** 2)) for n, r in reference.items())
    size = sum(float(np.sum(r ** 2)) for r in reference.values())
    return (diff / size) ** 0.5


def check(name, gpipe_opt, gpipe_run, work):
    build, optimizer = MODELS[name]
    model, example = build()
    onnx_path = os.path.join(work, name + ".onnx")
    example = example[:BATCH // MICRO]
    model.train()
    torch.onnx.export(model, example, onnx_path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"],
                      output_names=["logits"])
    x, y = data_for(name, example)
    data = os.path.join(work, name + ".npz")
    np.savez(data, input=x, labels=y)
    initial = {n: t.detach().clone() for n, t in model.state_dict().items()}

    got, params_dir = gpipe(gpipe_opt, gpipe_run, onnx_path, data, "bf16",
                            optimizer, STEPS, work, name)
    if got is None:
        return [params_dir]
    fp32, fp32_dir = gpipe(gpipe_opt, gpipe_run, onnx_path, data, "fp32",
                           optimizer, 1, work, name)
    if fp32 is None:
        return [fp32_dir]
    reference, ref_params = torch_train(model, x, y, optimizer, False)
    model.load_state_dict(initial)
    autocast, ac_params = torch_train(model, x, y, optimizer, True)
    missing = [n for n in ref_params
               if not os.path.exists(os.path.join(params_dir, n + ".npy"))]
    if missing:
        return [f"--save-params wrote no {missing[0]}.npy"]
    ours = {n: np.load(os.path.join(params_dir, n + ".npy")).astype(np.float64)
            for n in ref_params}
    ours_d, autocast_d = distance(ours, ref_params), distance(ac_params,
                                                               ref_params)
    first = abs(got[0] - autocast[0]) / abs(autocast[0])
    print(f"{name}: first loss gpipe bf16 {got[0]:.6f}, autocast "
          f"{autocast[0]:.6f}, float32 {reference[0]:.6f} (gpipe fp32 "
          f"{fp32[0]:.6f}); after {STEPS} steps loss gpipe bf16 {got[-1]:.4f}, "
          f"autocast {autocast[-1]:.4f}, float32 {reference[-1]:.4f}; "
          f"parameters from float32's: gpipe bf16 {ours_d:.3e}, autocast "
          f"{autocast_d:.3e} (ratio {ours_d / autocast_d:.2f})")
    errors = []
    if not first <= FIRST_LOSS_TOLERANCE:
        errors.append(f"first loss {first:.2e} relative from autocast's")
    if not ours_d <= DRIFT_AT_MOST * autocast_d:
        errors.append(f"gpipe bf16 drifted {ours_d:.3e} from float32, more "
                      f"than {DRIFT_AT_MOST}x autocast's {autocast_d:.3e}")
    if not ours_d >= DRIFT_AT_LEAST * autocast_d:
        errors.append(f"gpipe bf16 is {ours_d:.3e} from float32, under "
                      f"{DRIFT_AT_LEAST}x autocast's {autocast_d:.3e}: it "
                      "does not round to bfloat16")
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    only = sys.argv[4] if len(sys.argv) > 4 else ""
    os.makedirs(work, exist_ok=True)
    cases = [(name, name) for name in MODELS if only in name]
    return reference_models.run_checks(
        cases, lambda name: check(name, gpipe_opt, gpipe_run, work))


if __name__ == "__main__":
    sys.exit(main())
