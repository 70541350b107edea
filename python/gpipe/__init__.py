"""gpipe from Python: compile a PyTorch module or an ONNX file into a
pipelined training bundle, train it on NumPy arrays or a DataLoader, run it,
and write the trained model back as ONNX (docs/python.md).

    import gpipe
    bundle = gpipe.compile(model, torch.randn(64, 1, 28, 28),
                           devices="cpu:0,cpu:1", micro_batches=8)
    losses = bundle.train((x_train, y_train), epochs=1)
    logits = bundle.infer(x_test)
    bundle.save_onnx("trained.onnx")

`compile` runs the compiler, gpipe-opt (the same program as on the command
line: what it prints is printed, its errors raise CompileError); `train`,
`infer` and `save_onnx` run the runtime in this process (gpipe._runtime).
Given the same arrays and options, `train` takes the same steps as
`gpipe-run --train` to the last bit.
"""

import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import weakref

import numpy as np

from . import _runtime
from ._runtime import BundleError, InputError

__all__ = ["compile", "export", "load", "Bundle", "TrainResult",
           "CompileError", "InputError", "BundleError"]


class CompileError(RuntimeError):
    """gpipe-opt refused the model or the options; the message is its error
    (the file, the node and what to do)."""


# gpipe-opt's flags that compile() takes as keyword arguments (underscores
# for dashes). Values are passed as given; True stands for a bare flag.
_COMPILE_FLAGS = {
    "mode", "batch_size", "devices", "micro_batches", "loss", "ignore_index",
    "class_axis",
    "optimizer", "lr", "momentum", "nesterov", "weight_decay", "beta1",
    "beta2", "eps", "schedule", "recompute", "stages", "data_parallel",
    "plan", "device_profile", "cost_table", "report", "const_input",
    "freeze", "trainable", "batch_axis", "memory_per_device", "cuda_arch",
    "target_cpu", "target_features", "precision", "virtual_stages",
}
# Keyword arguments of compile() that make a training bundle (as the
# command line: a training flag implies --mode=train).
_TRAINING_FLAGS = {
    "micro_batches", "loss", "ignore_index", "class_axis", "optimizer", "lr",
    "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps", "schedule",
    "recompute", "stages", "data_parallel", "plan", "memory_per_device",
    "virtual_stages",
}


def _gpipe_opt():
    """The compiler: $GPIPE_OPT, this build's, or gpipe-opt on PATH."""
    candidates = [os.environ.get("GPIPE_OPT")]
    try:
        from . import _paths
        candidates.append(os.path.join(_paths.BIN_DIR, "gpipe-opt"))
    except ImportError:
        pass
    candidates.append(shutil.which("gpipe-opt"))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise CompileError("gpipe-opt not found: build gpipe (scripts/build.sh), "
                       "put gpipe-opt on PATH or set GPIPE_OPT")


def _is_module(model):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def _as_tuple(example_input):
    return example_input if isinstance(example_input, tuple) \
        else (example_input,)


def _input_names(model, count):
    """The module's forward parameter names, which name the ONNX inputs
    (and so the arrays of a data dict)."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters
                  .values() if p.kind in (p.POSITIONAL_ONLY,
                                          p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params][:count]
    except (TypeError, ValueError):
        names = []
    if len(names) != count or len(set(names)) != count or "labels" in names:
        names = ["input"] if count == 1 else \
            ["input%d" % i for i in range(count)]
    return names


def export(model, example_input, path, train=True):
    """Exports a torch.nn.Module to ONNX as gpipe trains it (the call of
    docs/export-from-pytorch.md): opset 17, training-mode BatchNorm and
    Dropout when `train`, parameters kept as named initializers, inputs
    named after forward's parameters, the batch of `example_input`.
    Returns the input names."""
    import torch
    args = _as_tuple(example_input)
    names = _input_names(model, len(args))
    was_training = model.training
    model.train(train)
    try:
        torch.onnx.export(
            model, args, path, opset_version=17,
            training=(torch.onnx.TrainingMode.TRAINING if train
                      else torch.onnx.TrainingMode.EVAL),
            do_constant_folding=False, input_names=names,
            output_names=["output"])
    finally:
        model.train(was_training)
    return names


def _exported_buffers(model, onnx_path):
    """The module's floating-point buffers (named_buffers()) that the export
    kept as initializers, as --freeze patterns: PyTorch never trains a
    buffer, and ONNX stores buffers like parameters."""
    import onnx
    floats = {name for name, b in model.named_buffers()
              if b.is_floating_point()}
    if not floats:
        return []
    graph = onnx.load(onnx_path, load_external_data=False).graph
    return [re.sub(r"([*?\[\]\\])", r"\\\1", t.name)
            for t in graph.initializer if t.name in floats]


def _flag(name, value):
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return ["%s=%s" % (flag, value)]


def compile(model, example_input=None, *, output=None, quiet=False,
            **options):
    """Compiles `model` into a bundle and returns it as a Bundle.

    model: a torch.nn.Module (exported to ONNX with `export`, which needs
        `example_input`: a tensor, or a tuple for several inputs, whose
        first dimension is the batch, or dimension `batch_axis=K` for a
        sequence-first model) or the path of an ONNX file.
    output: the bundle directory to write (default: a temporary directory
        removed with the Bundle object).
    quiet: do not print what the compiler prints (the training
        configuration, the per-stage table, the predicted step).
    options: gpipe-opt's flags with underscores, e.g. devices="cpu:0,cpu:1"
        (or a list), micro_batches=8, batch_size=64, optimizer="adamw",
        lr=3e-4, schedule="1f1b", recompute="always", mode="train",
        precision="bf16" (products of matrices in bfloat16 with float32
        sums and float32 weights; default "fp32"; docs/training.md),
        plan="auto" or "given" (devices alone: auto, as on the command
        line), virtual_stages=2 (two stages on each device in turns,
        schedule "interleaved-1f1b", or laid out as a V with
        schedule="zb-v"; docs/pipeline.md),
        freeze=["pe"] (names or patterns of initializers not to train),
        trainable=["head.*"] (the only ones to train). A module's
        floating-point buffers (named_buffers()) are always frozen.
        A training option or several devices make a training bundle, as on
        the command line.
    """
    unknown = sorted(set(options) - _COMPILE_FLAGS)
    if unknown:
        raise TypeError("compile() got unknown option(s) %s; it takes %s" % (
            ", ".join(unknown), ", ".join(sorted(_COMPILE_FLAGS))))
    devices = options.get("devices")
    if isinstance(devices, (list, tuple)):
        devices = options["devices"] = ",".join(devices)
    train = options.get("mode") == "train" or (
        options.get("mode") is None and (
            any(options.get(k) is not None for k in _TRAINING_FLAGS) or
            (devices is not None and "," in devices)))
    work = tempfile.mkdtemp(prefix="gpipe-")
    try:
        if _is_module(model):
            if example_input is None:
                raise TypeError("compile(module) needs an example input "
                                "(a tensor whose first dimension is the "
                                "batch, or a tuple of them)")
            onnx_path = os.path.join(work, type(model).__name__ + ".onnx")
            export(model, example_input, onnx_path, train=train)
            buffers = _exported_buffers(model, onnx_path) if train else []
            if buffers:
                given = options.get("freeze") or []
                if isinstance(given, str):
                    given = given.split(",")
                options["freeze"] = list(given) + buffers
        elif isinstance(model, (str, os.PathLike)):
            onnx_path = os.fspath(model)
            if example_input is not None:
                raise TypeError("compile(path): the ONNX file fixes its "
                                "inputs; pass no example input")
        else:
            raise TypeError("compile() takes a torch.nn.Module or the path "
                            "of an .onnx file, not %s" % type(model).__name__)
        path = os.fspath(output) if output is not None else \
            os.path.join(work, "model.gpipe")
        command = [_gpipe_opt(), onnx_path, "-o", path]
        for name, value in options.items():
            command += _flag(name, value)
        done = subprocess.run(command, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise CompileError(done.stderr.strip() or
                               "gpipe-opt failed (exit %d)" % done.returncode)
        if not quiet:
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)  # warnings
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    bundle = Bundle(path)
    if output is None:
        bundle._finalizer = weakref.finalize(
            bundle, shutil.rmtree, work, ignore_errors=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return bundle


def load(path):
    """The bundle at `path` (written by gpipe-opt or compile)."""
    return Bundle(path)


def _numpy(value):
    """A NumPy array of a NumPy array, a torch tensor or a list."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value)


class TrainResult(list):
    """What train() did: the loss of every step (the list itself), and

    evaluations: one dict per evaluation (epoch, step, accuracy, loss,
        samples) when train() had eval_data;
    accuracy, eval_loss: those of the last evaluation (None without);
    samples_per_second: the pace after the first step (tokens per second
        for a language model);
    seconds: the run's time; stopped: whether a callback ended it.
    """

    def __init__(self, result):
        super().__init__(result["losses"])
        self.losses = list(result["losses"])
        self.evaluations = list(result["evaluations"])
        self.samples_per_second = result["items_per_second"]
        self.seconds = result["seconds"]
        self.stopped = result["stopped"]
        last = self.evaluations[-1] if self.evaluations else None
        self.accuracy = last["accuracy"] if last else None
        self.eval_loss = last["loss"] if last else None

    def __repr__(self):
        text = "<TrainResult: %d steps, loss %s -> %s" % (
            len(self), "%.4g" % self[0] if self else "-",
            "%.4g" % self[-1] if self else "-")
        if self.accuracy is not None:
            text += ", accuracy %.4g" % self.accuracy
        return text + ">"


class Bundle:
    """A compiled bundle: a training bundle trains (`train`, `step`), and
    both kinds run (`infer`)."""

    def __init__(self, path):
        import json
        self.path = os.fspath(path)
        manifest = os.path.join(self.path, "manifest.json")
        try:
            with open(manifest) as f:
                m = json.load(f)
        except OSError as e:
            raise BundleError("%s: not a bundle (%s)" % (self.path, e))
        self.mode = m.get("mode")
        # "fp32" or "bf16": how the bundle's kernels multiply.
        self.precision = m.get("precision", "fp32")
        # One per stage (an inference bundle of several: pipelined).
        self.devices = list(m.get("devices") or [])
        self._session = None
        self._inference = None      # (steps taken, InferenceSession)
        self._work = None
        if self.mode == "train":
            self._session = _runtime.TrainingSession(self.path)
        else:
            self._inference = (0, _runtime.InferenceSession(self.path))

    def __repr__(self):
        if self._session is None:
            stages = ""
            if len(self.devices) > 1:
                stages = " on %s (%d stages, pipelined)" % (
                    ",".join(self.devices), len(self.devices))
            return "<gpipe.Bundle %s: inference%s, batch %d%s>" % (
                self.path, stages, self._inference[1].compiled_batch,
                ", bf16" if self.precision == "bf16" else "")
        s = self._session
        return "<gpipe.Bundle %s: training on %s, batch %d in %d " \
            "micro-batches%s, %d steps taken>" % (
                self.path, ",".join(s.devices), s.batch_size,
                s.micro_batches,
                ", bf16" if self.precision == "bf16" else "", s.steps_taken)

    # Training -------------------------------------------------------------

    def _training(self, what):
        if self._session is None:
            raise InputError("%s: %s is an inference bundle; compile a "
                             "training bundle (a training option, several "
                             "devices or mode='train')" % (what, self.path))
        return self._session

    @property
    def batch_size(self):
        """Samples per optimizer step (training) or per run (inference)."""
        return self._session.batch_size if self._session is not None \
            else self._inference[1].compiled_batch

    @property
    def input_names(self):
        """The model's data inputs, as the arrays of a data dict name them
        (besides "labels")."""
        if self._session is None:
            return list(self._inference[1].inputs)
        return [n for n in self._session.data_inputs if n != "labels"]

    def _arrays(self, data, labels, what):
        """A data set as a dict of arrays by input name and "labels"."""
        if isinstance(data, dict):
            arrays = {k: _numpy(v) for k, v in data.items()}
            if labels is not None:
                arrays["labels"] = _numpy(labels)
            return arrays
        if isinstance(data, (tuple, list)) and labels is None:
            if len(data) != 2:
                raise InputError("%s: a tuple is (inputs, labels)" % what)
            data, labels = data
        names = self.input_names
        if len(names) != 1:
            raise InputError(
                "%s: the model has inputs %s: pass a dict of arrays by "
                "those names and 'labels'" % (what, ", ".join(names)))
        if labels is None:
            raise InputError("%s: no labels (pass (x, labels), labels=..., "
                             "or a dict with 'labels')" % what)
        return {names[0]: _numpy(data), "labels": _numpy(labels)}

    def train(self, data, labels=None, *, epochs=None, steps=None,
              eval_data=None, lr=None, seed=0, shuffle=True, quiet=False,
              callback=None, **options):
        """Trains, printing progress, and returns a TrainResult: the loss of
        every step (it is that list), the evaluations and the throughput.

        data: arrays (NumPy or torch) as a dict by input name and
            "labels", a tuple (inputs, labels) for a model of one input,
            the inputs with `labels=`, the path of a data set as
            gpipe-run --data takes it, or an iterable of batches (a torch
            DataLoader: (inputs, labels) or dicts, each of batch_size rows;
            drop_last=True), passed over `epochs` times in its own order.
        epochs, steps: how long (one of them; default one epoch).
        eval_data: arrays, a path or an iterable of batches: the test
            accuracy and loss after each epoch.
        lr, seed, shuffle: the learning rate (default: the compiled one),
            the seed of the data order and dropout, whether to shuffle
            (arrays and paths; a DataLoader orders its own batches).
        callback: called after every step with a StepInfo (step, loss, lr);
            setting its `stop` ends the training after that step, setting
            its `lr` changes the learning rate of the following steps.
        options: more of gpipe-run's training flags with underscores:
            lr_schedule, warmup_steps, lr_step_size, lr_gamma, momentum,
            weight_decay, beta1, beta2, eps, loss_log, metrics,
            checkpoint_dir, checkpoint_every, resume, save_onnx,
            save_onnx_training, save_params, trace, report, profile_ops,
            stream_data ("auto", "always" or "never": an .npz path's large
            stored arrays read a batch at a time, docs/training.md).
        """
        session = self._training("train")
        if epochs is not None and steps is not None:
            raise InputError("train(): epochs and steps exclude each other")
        out = dict(options, epochs=epochs, steps=steps, lr=lr, seed=seed,
                   shuffle=shuffle, terminal=sys.stdout.isatty(),
                   columns=shutil.get_terminal_size().columns)
        arrays = next_batch = None
        per_epoch = 0
        if isinstance(data, (str, os.PathLike)):
            out["data"] = os.fspath(data)
        elif isinstance(data, (dict, tuple, list, np.ndarray)) or \
                hasattr(data, "detach"):
            arrays = self._arrays(data, labels, "train()")
        else:
            next_batch, per_epoch = self._batches(session, data)
        eval_arrays = None
        if isinstance(eval_data, (str, os.PathLike)):
            out["eval_data"] = os.fspath(eval_data)
        elif eval_data is not None:
            eval_arrays = self._eval_arrays(eval_data)
        if quiet:
            devnull = open(os.devnull, "w")
            saved, sys.stdout = sys.stdout, devnull
        try:
            result = session.train(out, arrays, eval_arrays,
                                   next_batch=next_batch,
                                   steps_per_epoch=per_epoch,
                                   callback=callback)
        finally:
            if quiet:
                sys.stdout = saved
                devnull.close()
        return TrainResult(result)

    def _batches(self, session, loader):
        """(next_batch(step), steps per pass) over an iterable of batches,
        checked before the first step where the loader says enough (a
        DataLoader's batch_size and drop_last)."""
        batch = session.batch_size
        size = getattr(loader, "batch_size", None)
        if size is not None and size != batch:
            raise InputError(
                "train(batches): the DataLoader's batch_size is %d; the "
                "bundle takes %d rows per step (compile with batch_size=%d "
                "or make the DataLoader with batch_size=%d)"
                % (size, batch, size, batch))
        dataset = getattr(loader, "dataset", None)
        if size is not None and getattr(loader, "drop_last", True) is False:
            try:
                rows = len(dataset)
            except TypeError:
                rows = None
            if rows is None or rows % batch:
                raise InputError(
                    "train(batches): the DataLoader's last batch would have "
                    "%s rows, not %d: make it with drop_last=True"
                    % ("fewer" if rows is None else rows % batch, batch))
        try:
            per_epoch = len(loader)
        except TypeError:
            per_epoch = 0
        state = {"iterator": None, "taken": 0}

        def next_batch(step):
            # A run resumed at `step` skips what the passes before took.
            if state["iterator"] is None:
                state["iterator"] = iter(loader)
                state["taken"] = 0
                for _ in range(step % per_epoch if per_epoch else step):
                    next(state["iterator"])
                    state["taken"] += 1
            try:
                item = next(state["iterator"])
            except StopIteration:
                if state["taken"] == 0:
                    raise InputError("train(batches): the iterable gave no "
                                     "batch")
                state["iterator"] = iter(loader)
                state["taken"] = 0
                item = next(state["iterator"])
            state["taken"] += 1
            arrays = self._arrays(item, None, "batch %d" % (step + 1))
            axes = self._session.sample_axes
            rows = {np.shape(a)[axes.get(k, 0)] for k, a in arrays.items()}
            if rows != {batch}:
                raise InputError(
                    "batch %d has %s rows; the bundle takes %d per step (a "
                    "DataLoader of batch_size=%d with drop_last=True)"
                    % (step + 1, "/".join(map(str, sorted(rows))), batch,
                       batch))
            return arrays
        return next_batch, per_epoch

    def _eval_arrays(self, eval_data):
        """Evaluation data as arrays: arrays as given, or the batches of an
        iterable concatenated."""
        if isinstance(eval_data, (dict, tuple, list, np.ndarray)) or \
                hasattr(eval_data, "detach"):
            return self._arrays(eval_data, None, "eval_data")
        parts = [self._arrays(b, None, "eval_data batch %d" % (i + 1))
                 for i, b in enumerate(eval_data)]
        if not parts:
            raise InputError("eval_data: the iterable gave no batch")
        axes = self._session.sample_axes if self._session else {}
        return {k: np.concatenate([p[k] for p in parts], axis=axes.get(k, 0))
                for k in parts[0]}

    @property
    def steps_taken(self):
        """The optimizer steps this bundle has taken (across train() calls,
        from a resumed checkpoint on)."""
        return self._training("steps_taken").steps_taken

    def step(self, data, labels=None):
        """One optimizer step on one batch of batch_size rows; returns its
        mean loss."""
        return self._training("step").step(
            self._arrays(data, labels, "step()"))

    def parameters(self):
        """The trained parameters and BatchNorm statistics, by ONNX name
        (as model.state_dict() names them)."""
        return self._training("parameters").parameters()

    def save_onnx(self, path, training=False):
        """Writes the trained model as ONNX: an inference model (BatchNorm
        on running statistics, Dropout off), or with training=True the
        training graph as exported. Written atomically."""
        return self._training("save_onnx").save_onnx(os.fspath(path),
                                                     training)

    # Inference ------------------------------------------------------------

    def _inference_session(self):
        """The inference bundle: this one, or for a training bundle one
        compiled from its trained model (again after more training)."""
        if self._session is None:
            return self._inference[1]
        taken = self._session.steps_taken
        if self._inference is None or self._inference[0] != taken:
            if self._work is None:
                self._work = tempfile.mkdtemp(prefix="gpipe-infer-")
                weakref.finalize(self, shutil.rmtree, self._work,
                                 ignore_errors=True)
            onnx_path = os.path.join(self._work, "trained.onnx")
            bundle = os.path.join(self._work, "infer-%d.gpipe" % taken)
            self.save_onnx(onnx_path)
            done = subprocess.run(
                [_gpipe_opt(), onnx_path, "--mode=infer", "-o", bundle,
                 "--batch-size=%d" % self._session.batch_size] +
                ["--batch-axis=%s:%d" % (name, axis) for name, axis in
                 self._session.sample_axes.items()
                 if axis and name != "labels"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                raise CompileError(done.stderr.strip())
            if self._inference is not None:
                shutil.rmtree(os.path.join(
                    self._work, "infer-%d.gpipe" % self._inference[0]),
                    ignore_errors=True)
            self._inference = (taken, _runtime.InferenceSession(bundle))
        return self._inference[1]

    def infer(self, *inputs, **named):
        """Runs the model in inference mode on any number of rows: the
        inputs in order or by name (NumPy or torch). Returns the output, or
        a dict of outputs by name when the model has several. A training
        bundle runs its trained parameters (compiled for inference on first
        use, and again after more training)."""
        session = self._inference_session()
        names = list(session.inputs)
        if len(inputs) > len(names):
            raise InputError("infer(): the model takes %d input(s) (%s), "
                             "got %d" % (len(names), ", ".join(names),
                                         len(inputs)))
        arrays = dict(zip(names, (_numpy(x) for x in inputs)))
        for k, v in named.items():
            if k in arrays:
                raise InputError("infer(): input '%s' given twice" % k)
            arrays[k] = _numpy(v)
        outputs = session.run(arrays)
        if any(hasattr(x, "detach") for x in list(inputs) +
               list(named.values())):
            # Torch in, torch out.
            import torch
            outputs = {k: torch.from_numpy(v) for k, v in outputs.items()}
        if len(outputs) == 1:
            return next(iter(outputs.values()))
        return outputs
