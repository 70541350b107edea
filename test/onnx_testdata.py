"""Helpers shared by the drivers over the ONNX backend test data
(libonnx-testdata): which ops gpipe accepts, and compiling a case with the
graph inputs it needs at compile time bound to the case's data."""
import os
import re
import subprocess

NEEDS_CONSTANT = re.compile(r"\(input '([^']+)'\) must be known at compile time")


def supported_ops(gpipe_opt):
    """The op types of the default domain the importer accepts, as
    gpipe-opt lists them."""
    out = subprocess.run([gpipe_opt, "--print-onnx-ops"], check=True,
                         capture_output=True, text=True).stdout
    return {line for line in out.splitlines() if "." not in line}


def compile_with_bindings(gpipe_opt, case, model, args, timeout):
    """Runs `gpipe-opt CASE/model.onnx ARGS`, binding with --const-input each
    graph input gpipe-opt reports it needs at compile time to the case's
    first data set, as a user would. Returns (process, {input: .pb file},
    runtime input names)."""
    initializers = {t.name for t in model.graph.initializer}
    runtime_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    bindings = {}
    while True:
        command = [gpipe_opt, os.path.join(case, "model.onnx")] + args
        command += [f"--const-input={n}={p}" for n, p in bindings.items()]
        proc = subprocess.run(command, capture_output=True, text=True,
                              timeout=timeout)
        match = NEEDS_CONSTANT.search(proc.stderr)
        if proc.returncode == 0 or not match or match.group(1) not in runtime_inputs \
                or match.group(1) in bindings:
            return proc, bindings, runtime_inputs
        index = runtime_inputs.index(match.group(1))
        bindings[match.group(1)] = os.path.join(case, "test_data_set_0",
                                                f"input_{index}.pb")
