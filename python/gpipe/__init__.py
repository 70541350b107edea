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
import shutil
import subprocess
import sys
import tempfile
import time
import weakref

import numpy as np

from . import _runtime
from ._runtime import BundleError, InputError

__all__ = ["compile", "export", "load", "Bundle", "CompileError",
           "InputError", "BundleError"]


class CompileError(RuntimeError):
    """gpipe-opt refused the model or the options; the message is its error
    (the file, the node and what to do)."""


# gpipe-opt's flags that compile() takes as keyword arguments (underscores
# for dashes). Values are passed as given; True stands for a bare flag.
_COMPILE_FLAGS = {
    "mode", "batch_size", "devices", "micro_batches", "loss", "ignore_index",
    "optimizer", "lr", "momentum", "nesterov", "weight_decay", "beta1",
    "beta2", "eps", "schedule", "recompute", "stages", "data_parallel",
    "device_profile", "cost_table", "report", "const_input",
}
# Keyword arguments of compile() that make a training bundle (as the
# command line: a training flag implies --mode=train).
_TRAINING_FLAGS = {
    "micro_batches", "loss", "ignore_index", "optimizer", "lr", "momentum",
    "nesterov", "weight_decay", "beta1", "beta2", "eps", "schedule",
    "recompute", "stages", "data_parallel",
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
        first dimension is the batch) or the path of an ONNX file.
    output: the bundle directory to write (default: a temporary directory
        removed with the Bundle object).
    quiet: do not print what the compiler prints (the training
        configuration, the per-stage table, the predicted step).
    options: gpipe-opt's flags with underscores, e.g. devices="cpu:0,cpu:1"
        (or a list), micro_batches=8, batch_size=64, optimizer="adamw",
        lr=3e-4, schedule="1f1b", recompute="always", mode="train".
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
        self._session = None
        self._inference = None      # (steps taken, InferenceSession)
        self._work = None
        if self.mode == "train":
            self._session = _runtime.TrainingSession(self.path)
        else:
            self._inference = (0, _runtime.InferenceSession(self.path))

    def __repr__(self):
        if self._session is None:
            return "<gpipe.Bundle %s: inference, batch %d>" % (
                self.path, self._inference[1].compiled_batch)
        s = self._session
        return "<gpipe.Bundle %s: training on %s, batch %d in %d " \
            "micro-batches, %d steps taken>" % (
                self.path, ",".join(s.devices), s.batch_size,
                s.micro_batches, s.steps_taken)

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
              **options):
        """Trains, printing progress, and returns the loss of every step.

        data: arrays (NumPy or torch) as a dict by input name and
            "labels", a tuple (inputs, labels) for a model of one input,
            the inputs with `labels=`, the path of a data set as
            gpipe-run --data takes it, or an iterable of batches (a torch
            DataLoader: (inputs, labels) or dicts, each of batch_size rows;
            drop_last=True), passed over `epochs` times.
        epochs, steps: how long (one of them; default one epoch).
        eval_data: arrays or a path: the test accuracy after each epoch.
        lr, seed, shuffle: the learning rate (default: the compiled one),
            the seed of the data order and dropout, whether to shuffle.
        options: more of gpipe-run's training flags with underscores:
            lr_schedule, warmup_steps, lr_step_size, lr_gamma, momentum,
            weight_decay, beta1, beta2, eps, loss_log, metrics,
            checkpoint_dir, checkpoint_every, resume, save_onnx,
            save_onnx_training, save_params, trace, report, profile_ops.
        """
        session = self._training("train")
        if epochs is not None and steps is not None:
            raise InputError("train(): epochs and steps exclude each other")
        out = dict(options, epochs=epochs, steps=steps, lr=lr, seed=seed,
                   shuffle=shuffle, terminal=sys.stdout.isatty(),
                   columns=shutil.get_terminal_size().columns)
        if quiet:
            devnull = open(os.devnull, "w")
            saved, sys.stdout = sys.stdout, devnull
        try:
            if isinstance(data, (str, os.PathLike)) or isinstance(
                    data, (dict, tuple, list, np.ndarray)) or \
                    hasattr(data, "detach"):
                losses = self._train_arrays(session, data, labels, eval_data,
                                            out)
            else:
                losses = self._train_batches(session, data, eval_data, out)
        finally:
            if quiet:
                sys.stdout = saved
                devnull.close()
        return losses

    def _train_arrays(self, session, data, labels, eval_data, options):
        arrays = eval_arrays = None
        if isinstance(data, (str, os.PathLike)):
            options["data"] = os.fspath(data)
        else:
            arrays = self._arrays(data, labels, "train()")
        if isinstance(eval_data, (str, os.PathLike)):
            options["eval_data"] = os.fspath(eval_data)
        elif eval_data is not None:
            eval_arrays = self._arrays(eval_data, None, "eval_data")
        return session.train(options, arrays, eval_arrays)

    def _train_batches(self, session, loader, eval_data, options):
        """A Python loop over an iterable of batches: each batch is one
        step."""
        unsupported = sorted(k for k, v in options.items() if v and k not in (
            "epochs", "steps", "lr", "seed", "shuffle", "terminal",
            "columns"))
        if unsupported:
            raise InputError("train(batches): %s take arrays or a data "
                             "path, not an iterable of batches"
                             % ", ".join(unsupported))
        if options["lr"] is not None:
            session.lr = options["lr"]
        session.set_seed(options["seed"])
        try:
            per_epoch = len(loader)
        except TypeError:
            per_epoch = None
        steps = options["steps"]
        epochs = options["epochs"] or (1 if steps is None else None)
        if steps is None and per_epoch is None:
            raise InputError("train(batches): an iterable without len() "
                             "needs steps=N")
        total = steps if steps is not None else epochs * per_epoch
        config = _runtime.ProgressConfig()
        config.steps = total
        config.steps_per_epoch = per_epoch or total
        config.items_per_step = session.batch_size
        config.terminal = options["terminal"]
        config.columns = options["columns"]
        config.line_every = max(1, (per_epoch or total) // 10)
        progress = _runtime.Progress(config)
        eval_arrays = None if eval_data is None else \
            self._arrays(eval_data, None, "eval_data")
        losses, start, epoch = [], time.perf_counter(), 0
        while len(losses) < total:
            epoch += 1
            taken = len(losses)
            for batch in loader:
                if len(losses) == total:
                    break
                arrays = self._arrays(batch, None, "batch %d" %
                                      (len(losses) + 1))
                rows = {len(a) for a in arrays.values()}
                if rows != {session.batch_size}:
                    raise InputError(
                        "batch %d has %s rows; the bundle takes %d per step "
                        "(a DataLoader of batch_size=%d with drop_last=True)"
                        % (len(losses) + 1, "/".join(map(str, sorted(rows))),
                           session.batch_size, session.batch_size))
                losses.append(session.step(arrays))
                progress.update(len(losses) - 1, losses[-1], session.lr,
                                time.perf_counter() - start)
            if len(losses) == taken:
                raise InputError("train(batches): the iterable gave no "
                                 "batch in pass %d" % epoch)
            if eval_arrays is not None:
                progress.interrupt()
                self._print_accuracy(epoch, eval_arrays)
        progress.finish()
        return losses

    def _print_accuracy(self, epoch, arrays):
        labels = arrays.pop("labels")
        logits = self.infer(**arrays)
        right = float(np.mean(np.argmax(logits, axis=-1) == labels))
        print("epoch %d: test accuracy %g%% on %d samples"
              % (epoch, 100 * right, len(labels)))

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
                 "--batch-size=%d" % self._session.batch_size],
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
        if len(outputs) == 1:
            return next(iter(outputs.values()))
        return outputs
