"""The Python API (python/gpipe) against the command line and PyTorch.

- gpipe.compile(torch.nn.Module, example) then .train on NumPy arrays for
  20 steps gives the loss log and the parameters of the command-line path
  (torch.onnx.export as docs/export-from-pytorch.md says, gpipe-opt with
  the same flags, gpipe-run --train on an .npz) to the last bit: a CNN
  with BatchNorm and Dropout in a two-stage pipeline, AdamW, M = 4;
- .train leaves the calling thread on the cores it had;
- .train on a torch DataLoader (shuffle off) takes the steps gpipe-run
  --no-shuffle takes, to the last bit;
- precision="bf16" trains as gpipe-opt --precision=bf16, to the last bit
  (where the CPU has bfloat16 products; elsewhere compile() raises the
  runtime's error saying to use fp32),
  virtual_stages=2 as --virtual-stages=2, and with schedule="zb-v" as
  --schedule=zb-v (the stages as a V);
- .infer of the trained bundle equals the PyTorch module loaded with
  .parameters() in eval mode; .save_onnx writes an inference model;
- gpipe.compile of an ONNX path (an inference bundle) equals PyTorch;
- bad input raises errors that say what to do.

    api.py WORK_DIR      (gpipe importable; gpipe-opt, gpipe-run on PATH)
"""
import io
import json
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


def cli_bundle(name, *extra):
    """The exported CNN compiled by gpipe-opt with the flags of `flags` and
    `extra`, into WORK/name."""
    path = os.path.join(work, name)
    subprocess.run(["gpipe-opt", os.path.join(work, "cnn.onnx"), "-o", path,
                    "--devices=cpu:0,cpu:1", "--micro-batches=4",
                    "--optimizer=adamw", "--lr=2e-3"] + list(extra),
                   check=True, stdout=subprocess.DEVNULL)
    return path


bundle_cli = cli_bundle("cnn.gpipe")


def cli_losses(*extra, bundle_path=bundle_cli):
    log = os.path.join(work, "loss.csv")
    params = os.path.join(work, "params")
    subprocess.run(["gpipe-run", bundle_path, "--train", "--data",
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
# Training waits for its steps on the first stage's core and gives the
# caller's thread its cores back afterwards.
affinity = os.sched_getaffinity(0)
with contextlib.redirect_stdout(out):
    losses = bundle.train((x, y), steps=20, seed=3)
check("the caller's cores restored after train",
      os.sched_getaffinity(0) == affinity,
      "%s, then %s" % (sorted(affinity), sorted(os.sched_getaffinity(0))))
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

# The .npz path with its arrays read a batch at a time from the file.
bundle_s = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), quiet=True,
                         **flags)
streamed = bundle_s.train(os.path.join(work, "train.npz"), steps=20, seed=3,
                          quiet=True, stream_data="always")
check("stream_data='always' trains as the command line, bit for bit",
      streamed == cli, "%s vs %s" % (streamed[:3], cli[:3]))

# precision="bf16" is gpipe-opt's --precision=bf16: the same bundle, the
# same steps to the last bit. A CPU without bfloat16 products (oneDNN's
# need AVX-512; gpipe-run --list-devices says) refuses the bundle at load,
# here as on the command line, with an error that says what to do.
bf16_cpu = "CPU bfloat16 products (--precision=bf16): yes" in subprocess.run(
    ["gpipe-run", "--list-devices"], capture_output=True, text=True).stdout
if bf16_cpu:
    bundle_bf16 = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14),
                                quiet=True, precision="bf16", **flags)
    check("a bf16 bundle says so", bundle_bf16.precision == "bf16" and
          ", bf16," in repr(bundle_bf16) and bundle.precision == "fp32",
          repr(bundle_bf16))
    cli_bf16, _ = cli_losses(
        bundle_path=cli_bundle("cnn-bf16.gpipe", "--precision=bf16"))
    bf16_losses = bundle_bf16.train((x, y), steps=20, seed=3, quiet=True)
    check("precision='bf16' trains as --precision=bf16, bit for bit",
          bf16_losses == cli_bf16,
          "%s vs %s" % (bf16_losses[:3], cli_bf16[:3]))
    check("bf16 losses near float32's (within 5% at the first step)",
          abs(bf16_losses[0] - cli[0]) <= 0.05 * abs(cli[0]) and
          bf16_losses != cli, "%s vs %s" % (bf16_losses[:3], cli[:3]))
else:
    # compile() loads the bundle it wrote, which the runtime refuses.
    try:
        gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), quiet=True,
                      precision="bf16", **flags)
        refusal = "it loaded"
    except gpipe.BundleError as e:
        refusal = str(e)
    check("precision='bf16' is refused on a CPU without bfloat16 products",
          "multiplies in bfloat16" in refusal and
          "--precision=fp32" in refusal, refusal)

# virtual_stages=2 is gpipe-opt's --virtual-stages=2: four stages, two on
# each core in turns, the same steps to the last bit.
cli_il, _ = cli_losses(
    bundle_path=cli_bundle("cnn-interleaved.gpipe", "--virtual-stages=2"))
bundle_il = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), quiet=True,
                          virtual_stages=2, **flags)
il_kind = json.load(open(os.path.join(bundle_il.path, "manifest.json")))[
    "schedule"]["kind"]
check("virtual_stages=2 compiles interleaved-1f1b over four stages",
      il_kind == "interleaved-1f1b" and len(bundle_il.devices) == 4,
      "%s, %s" % (il_kind, bundle_il.devices))
il_losses = bundle_il.train((x, y), steps=20, seed=3, quiet=True)
check("virtual_stages=2 trains as --virtual-stages=2, bit for bit",
      il_losses == cli_il, "%s vs %s" % (il_losses[:3], cli_il[:3]))
# With schedule="zb-v" the two stages on each core lie as a V.
cli_v, _ = cli_losses(bundle_path=cli_bundle(
    "cnn-zb-v.gpipe", "--virtual-stages=2", "--schedule=zb-v"))
bundle_v = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), quiet=True,
                         virtual_stages=2, schedule="zb-v", **flags)
check("schedule='zb-v' lays the four stages out as a V",
      bundle_v.devices == ["cpu:0", "cpu:1", "cpu:1", "cpu:0"],
      str(bundle_v.devices))
v_losses = bundle_v.train((x, y), steps=20, seed=3, quiet=True)
check("schedule='zb-v' trains as --schedule=zb-v, bit for bit",
      v_losses == cli_v, "%s vs %s" % (v_losses[:3], cli_v[:3]))

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

# A DataLoader is a full citizen: every option arrays take, the same steps.
cli_cosine, _ = cli_losses("--no-shuffle", "--lr-schedule=cosine",
                           "--warmup-steps=3")
bundle3 = gpipe.compile(cnn(), torch.randn(32, 1, 14, 14), quiet=True,
                        **flags)
metrics = os.path.join(work, "metrics.jsonl")
checkpoints = os.path.join(work, "checkpoints")
saved_onnx = os.path.join(work, "loader.onnx")
result3 = bundle3.train(loader, steps=20, seed=3, quiet=True,
                        lr_schedule="cosine", warmup_steps=3, metrics=metrics,
                        checkpoint_dir=checkpoints, checkpoint_every=5,
                        save_onnx=saved_onnx)
check("a DataLoader takes lr_schedule, metrics, checkpoints and save_onnx",
      result3 == cli_cosine and
      len(open(metrics).read().splitlines()) == 20 and
      os.listdir(checkpoints) and os.path.exists(saved_onnx),
      "%s vs %s" % (result3[:3], cli_cosine[:3]))
check("train returns its result", isinstance(result3, gpipe.TrainResult) and
      result3.losses == list(result3) and result3.samples_per_second > 0 and
      result3.accuracy is None and not result3.stopped, repr(result3))

# Evaluation on a DataLoader: the accuracy and the cross-entropy of the
# trained model on its rows, as infer() gives them (an inference bundle of
# the trained model: the same float32 logits up to the rounding of other
# kernel blockings, ~1e-6 relative, so the loss within 1e-5).
x_eval = rng.standard_normal((70, 1, 14, 14), dtype=np.float32)
y_eval = rng.integers(0, 10, 70)
eval_loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.from_numpy(x_eval),
                                   torch.from_numpy(y_eval)), batch_size=16)
result4 = bundle3.train(loader, epochs=1, eval_data=eval_loader, quiet=True)
logits = bundle3.infer(x_eval)
want_accuracy = float(np.mean(np.argmax(logits, 1) == y_eval))
want_loss = float(torch.nn.functional.cross_entropy(
    torch.from_numpy(logits).double(), torch.from_numpy(y_eval)))
check("eval_data may be a DataLoader; its accuracy and loss are returned",
      len(result4) == 6 and len(result4.evaluations) == 1 and
      result4.accuracy == want_accuracy and
      abs(result4.eval_loss - want_loss) < 1e-5 * want_loss,
      "%r: %s %s vs %s %s" % (result4, result4.accuracy, result4.eval_loss,
                              want_accuracy, want_loss))

# A callback after every step: it sees the step and can change the
# learning rate or stop. (The run starts at the compiled rate, not where
# the cosine schedule of the runs before left it.)
seen = []


cuda_mapped = []


def cuda_libraries():
    """The CUDA libraries this process maps."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps
                if any(n in line for n in ("libcuda", "libcublas", "libcudnn",
                                           "libgpipe_runtime_cuda"))}


# A PyTorch built for CUDA maps its own: only what the run adds counts.
cuda_before = cuda_libraries()


def callback(info):
    seen.append((info.step, info.lr))
    # A CPU run maps no CUDA library: the backend is a plugin loaded for
    # GPU stages only.
    cuda_mapped.extend(cuda_libraries() - cuda_before)
    if info.step == 2:
        info.lr = 1e-4
    if info.step == 4:
        info.stop = True


taken = bundle3.steps_taken
result5 = bundle3.train((x, y), steps=10, quiet=True, callback=callback)
check("a callback changes the learning rate and stops the training",
      len(result5) == 4 and result5.stopped and
      [s for s, _ in seen] == [1, 2, 3, 4] and
      np.allclose([r for _, r in seen], [2e-3, 2e-3, 1e-4, 1e-4],
                  rtol=1e-6) and
      bundle3.steps_taken == taken + 4, "%s %r" % (seen, result5))
check("a CPU training run maps no CUDA library", seen and not cuda_mapped,
      "mapped: %s" % sorted(set(cuda_mapped)))

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
check("infer takes torch tensors and returns them",
      isinstance(got_torch, torch.Tensor) and
      np.array_equal(got, got_torch.numpy()), type(got_torch).__name__)

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
# Pipelined inference: mode="infer" with several devices, the same outputs.
piped = gpipe.compile(path, quiet=True, mode="infer",
                      devices=["cpu:0", "cpu:1"])
check("a pipelined inference bundle says its stages",
      piped.devices == ["cpu:0", "cpu:1"] and
      "inference on cpu:0,cpu:1 (2 stages, pipelined)" in repr(piped),
      repr(piped))
got_piped = piped.infer(x_test)
check("pipelined inference equals one stage",
      np.linalg.norm(got_piped - got2) <= 1e-6 * np.linalg.norm(got2),
      str(np.abs(got_piped - got2).max()))
# For another machine's CPU: a portable level, with features taken away.
portable = gpipe.compile(path, quiet=True, target_cpu="x86-64-v2",
                         target_features=["-popcnt"])
with open(os.path.join(portable.path, "manifest.json")) as f:
    manifest = json.load(f)
check("target_cpu and target_features reach the manifest",
      manifest["target_cpu"] == "x86-64-v2" and
      "sse4.2" in manifest["target_features"] and
      "popcnt" not in manifest["target_features"] and
      not any(n.startswith("avx") for n in manifest["target_features"]),
      str(manifest["target_cpu"]) + " " + str(manifest["target_features"]))
# (Its loops vectorized narrower: sums may round otherwise.)
check("a portable bundle infers as the host's",
      np.allclose(portable.infer(x_test), got2, rtol=1e-5, atol=1e-6))


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
raises("a bad precision is gpipe-opt's error", gpipe.CompileError,
       "--precision",
       lambda: gpipe.compile(cnn(), torch.randn(32, 1, 14, 14),
                             precision="fp16", quiet=True, **flags))
raises("a device's memory too small for the plan", gpipe.CompileError,
       "does not fit the devices' memory",
       lambda: gpipe.compile(cnn(), torch.randn(32, 1, 14, 14),
                             devices="cpu:0,cpu:1", micro_batches=4,
                             memory_per_device="69274699",  # 1000 bytes left
                             quiet=True))
raises("arrays of the wrong shape", gpipe.InputError,
       "array 'input' is float32[192, 1, 12, 12], expected float32[N, 1, 14, 14]",
       lambda: bundle.train((x[:, :, :12, :12], y), steps=1, quiet=True))
raises("no labels", gpipe.InputError, "no labels",
       lambda: bundle.train(x, steps=1, quiet=True))
odd = torch.utils.data.DataLoader(dataset, batch_size=30)
raises("a DataLoader of another batch size", gpipe.InputError,
       "batch_size is 30", lambda: bundle.train(odd, steps=2, quiet=True))
ragged = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.from_numpy(x[:100]),
                                   torch.from_numpy(y[:100])), batch_size=32)
bad_labels = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.from_numpy(x),
                                   torch.from_numpy((y + 10).astype(np.int32))),
    batch_size=32, drop_last=True)
raises("a DataLoader's labels are checked as arrays' are", gpipe.InputError,
       "is outside [0, 10)", lambda: bundle.train(bad_labels, steps=1,
                                                  quiet=True))
before = bundle.steps_taken
raises("a DataLoader without drop_last, before the first step",
       gpipe.InputError, "drop_last=True",
       lambda: bundle.train(ragged, epochs=2, quiet=True))
check("no step taken before that error", bundle.steps_taken == before)
raises("an inference bundle does not train", gpipe.InputError,
       "inference bundle", lambda: infer_bundle.train((x, y), steps=1))
raises("epochs and steps", gpipe.InputError, "exclude",
       lambda: bundle.train((x, y), steps=1, epochs=1))
raises("an unknown train option", gpipe.InputError, "lr_shedule",
       lambda: bundle.train((x, y), steps=1, lr_shedule="cosine"))
raises("a bad stream_data", gpipe.InputError, "auto, always or never",
       lambda: bundle_s.train(os.path.join(work, "train.npz"), steps=1,
                              quiet=True, stream_data="sometimes"))

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
