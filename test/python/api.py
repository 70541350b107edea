"""The Python API (python/gpipe) against the command line and PyTorch.

- gpipe.compile(torch.nn.Module, example) then .train on NumPy arrays for
  20 steps gives the loss log and the parameters of the command-line path
  (torch.onnx.export as docs/export-from-pytorch.md says, gpipe-opt with
  the same flags, gpipe-run --train on an .npz) to the last bit: a CNN
  with BatchNorm and Dropout in a two-stage pipeline, AdamW, M = 4;
- .train on a torch DataLoader (shuffle off) takes the steps gpipe-run
  --no-shuffle takes, to the last bit;
- .infer of the trained bundle equals the PyTorch module loaded with
  .parameters() in eval mode; .save_onnx writes an inference model;
- gpipe.compile of an ONNX path (an inference bundle) equals PyTorch;
- bad input raises errors that say what to do.

    api.py WORK_DIR      (gpipe importable; gpipe-opt, gpipe-run on PATH)
"""
import io
import os
import subprocess
import sys
import contextlib

import numpy as np
import torch

import gpipe

work = sys.argv[1]
os.makedirs(work, exist_ok=True)
failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        failures.append(name)


def cnn():
    torch.manual_seed(7)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 3, padding=1), torch.nn.BatchNorm2d(6),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Dropout(0.2), torch.nn.Linear(6 * 7 * 7, 32),
        torch.nn.ReLU(), torch.nn.Linear(32, 10))


rng = np.random.default_rng(11)
x = rng.standard_normal((192, 1, 14, 14), dtype=np.float32)
y = rng.integers(0, 10, 192)
flags = dict(devices="cpu:0,cpu:1", micro_batches=4, optimizer="adamw",
             lr=2e-3)

# The command-line path.
model = cnn()
model.train()
torch.onnx.export(model, torch.randn(32, 1, 14, 14),
                  os.path.join(work, "cnn.onnx"), opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False, input_names=["input"],
                  output_names=["logits"])
np.savez(os.path.join(work, "train.npz"), input=x, labels=y)
bundle_cli = os.path.join(work, "cnn.gpipe")
subprocess.run(["gpipe-opt", os.path.join(work, "cnn.onnx"), "-o", bundle_cli,
                "--devices=cpu:0,cpu:1", "--micro-batches=4",
                "--optimizer=adamw", "--lr=2e-3"], check=True,
               stdout=subprocess.DEVNULL)


def cli_losses(*extra):
    log = os.path.join(work, "loss.csv")
    params = os.path.join(work, "params")
    subprocess.run(["gpipe-run", bundle_cli, "--train", "--data",
                    os.path.join(work, "train.npz"), "--steps=20", "--seed=3",
                    "--loss-log", log, "--save-params", params] + list(extra),
                   check=True, stdout=subprocess.DEVNULL)
    losses = [float(line.split(",")[1]) for line in open(log).readlines()[1:]]
    saved = {f[:-4]: np.load(os.path.join(params, f))
             for f in os.listdir(params)}
    return losses, saved


cli, cli_params = cli_losses()

# The same through Python.
quiet = io.StringIO()
with contextlib.redirect_stdout(quiet):
    bundle = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), **flags)
printed = quiet.getvalue()
check("compile prints the training configuration",
      "optimizer adamw (lr 0.002" in printed and "stage" in printed, printed)
check("the bundle says what it is",
      "training on cpu:0,cpu:1, batch 32 in 4 micro-batches" in repr(bundle),
      repr(bundle))
check("input named after forward's parameter",
      bundle.input_names == ["input"], str(bundle.input_names))
out = io.StringIO()
with contextlib.redirect_stdout(out):
    losses = bundle.train((x, y), steps=20, seed=3)
check("train prints progress", "step 20/20 (100%)" in out.getvalue(),
      out.getvalue()[-500:])
check("20 steps equal to the command line, bit for bit", losses == cli,
      "%s vs %s" % (losses[:3], cli[:3]))
params = bundle.parameters()
check("parameters equal to --save-params, bit for bit",
      params.keys() == cli_params.keys() and
      all(np.array_equal(params[k], cli_params[k]) for k in params),
      "%s vs %s" % (sorted(params), sorted(cli_params)))
check("losses go down", np.mean(losses[-5:]) < np.mean(losses[:5]),
      str(losses))

# A DataLoader, in order, against gpipe-run --no-shuffle.
cli_in_order, _ = cli_losses("--no-shuffle")
bundle2 = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), quiet=True,
                        **flags)
dataset = torch.utils.data.TensorDataset(torch.from_numpy(x),
                                         torch.from_numpy(y))
loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=False,
                                     drop_last=True)
losses2 = bundle2.train(loader, steps=20, seed=3, quiet=True)
check("a DataLoader trains like --no-shuffle, bit for bit",
      losses2 == cli_in_order, "%s vs %s" % (losses2[:3], cli_in_order[:3]))

# Inference with the trained parameters equals PyTorch in eval mode.
reference = cnn()
state = {k: torch.from_numpy(v) for k, v in params.items()}
missing, unexpected = reference.load_state_dict(state, strict=False)
check("parameters are named as the module's state_dict",
      not unexpected and all(k.endswith("num_batches_tracked")
                             for k in missing), "%s %s" % (missing, unexpected))
reference.eval()
x_test = rng.standard_normal((45, 1, 14, 14), dtype=np.float32)
with torch.no_grad():
    want = reference(torch.from_numpy(x_test)).numpy()
got = bundle.infer(x_test)
check("infer of the trained bundle equals PyTorch eval",
      got.shape == want.shape and np.abs(got - want).max() < 1e-4,
      "%s vs %s, max diff %s" % (got.shape, want.shape,
                                 np.abs(got - want).max()))
got_torch = bundle.infer(torch.from_numpy(x_test))
check("infer takes torch tensors", np.array_equal(got, got_torch))

# save_onnx: an inference model, written atomically.
import onnx
path = os.path.join(work, "trained.onnx")
count = bundle.save_onnx(path)
m = onnx.load(path)
onnx.checker.check_model(m)
bn = [n for n in m.graph.node if n.op_type == "BatchNormalization"][0]
check("save_onnx writes an inference model",
      count == len(params) and
      [a.i for a in bn.attribute if a.name == "training_mode"] in ([], [0]),
      str(bn))

# An ONNX path compiles to an inference bundle.
infer_bundle = gpipe.compile(path, quiet=True)
check("an inference bundle", infer_bundle.mode == "infer" and
      infer_bundle.batch_size == 32, repr(infer_bundle))
got2 = infer_bundle.infer(x_test)
check("infer of a compiled ONNX file equals PyTorch eval",
      np.abs(got2 - want).max() < 1e-4, str(np.abs(got2 - want).max()))


def raises(name, kind, text, fn):
    try:
        fn()
    except kind as e:
        check(name, text in str(e), "message: %s" % e)
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind is a failure
        check(name, False, "raised %s: %s" % (type(e).__name__, e))
        return
    check(name, False, "no error")


raises("unknown compile option", TypeError, "micro_batch",
       lambda: gpipe.compile(cnn(), torch.randn(32, 1, 14, 14),
                             micro_batch=4))
raises("a module needs an example input", TypeError, "example input",
       lambda: gpipe.compile(cnn()))
raises("compiler errors raise CompileError", gpipe.CompileError,
       "--devices", lambda: gpipe.compile(cnn(), torch.randn(32, 1, 14, 14),
                                          devices="gpu:0,cpu:1",
                                          quiet=True))
raises("arrays of the wrong shape", gpipe.InputError,
       "array 'input' is float32[192, 1, 12, 12], expected float32[N, 1, 14, 14]",
       lambda: bundle.train((x[:, :, :12, :12], y), steps=1, quiet=True))
raises("no labels", gpipe.InputError, "no labels",
       lambda: bundle.train(x, steps=1, quiet=True))
odd = torch.utils.data.DataLoader(dataset, batch_size=30)
raises("a DataLoader of another batch size", gpipe.InputError,
       "drop_last=True", lambda: bundle.train(odd, steps=2, quiet=True))
raises("an inference bundle does not train", gpipe.InputError,
       "inference bundle", lambda: infer_bundle.train((x, y), steps=1))
raises("epochs and steps", gpipe.InputError, "exclude",
       lambda: bundle.train((x, y), steps=1, epochs=1))
raises("an unknown train option", gpipe.InputError, "lr_shedule",
       lambda: bundle.train((x, y), steps=1, lr_shedule="cosine"))

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
