"""Imports every ONNX backend node test (libonnx-testdata) made only of ops
gpipe accepts, and checks that each imports without error.

A test is selected when every node of its model has an op type the importer
lists as supported (gpipe-opt --print-onnx-ops). gpipe compiles static
programs, so graph inputs that an op needs at compile time (a Reshape's
shape, Slice bounds, ...) are bound to the test's input data with
--const-input, as a user would bind them. Tests that use a
feature gpipe rejects on purpose are listed in EXPECTED_REJECTIONS with the
reason, and must still be refused with a clean one-line error.

usage: backend_node_tests.py GPIPE_OPT TESTDATA_DIR WORK_DIR
"""
import os
import re
import subprocess
import sys

import onnx

def supported_ops(gpipe_opt):
    """The op types the importer accepts, as gpipe-opt lists them."""
    out = subprocess.run([gpipe_opt, "--print-onnx-ops"], check=True,
                         capture_output=True, text=True).stdout
    return {line for line in out.splitlines() if "." not in line}

# Tests of supported ops that use features gpipe refuses by design.
EXPECTED_REJECTIONS = {
    "test_cast_FLOAT_to_STRING": "string tensors",
    "test_cast_STRING_to_FLOAT": "string tensors",
    "test_castlike_FLOAT_to_STRING_expanded": "string tensors",
    "test_castlike_STRING_to_FLOAT_expanded": "string tensors",
    "test_identity_opt": "optional types",
    "test_identity_sequence": "sequence types",
    "test_maxpool_with_argmax_2d_precomputed_pads": "MaxPool argmax output",
    "test_maxpool_with_argmax_2d_precomputed_strides": "MaxPool argmax output",
    "test_reshape_allowzero_reordered": "zero-sized tensors",
    "test_split_zero_size_splits": "zero-sized tensors",
    "test_training_dropout_default_mask": "random dropout mask as an output",
    "test_training_dropout_mask": "random dropout mask as an output",
}

NEEDS_CONSTANT = re.compile(r"\(input '([^']+)'\) must be known at compile time")


def compile_test(gpipe_opt, test_dir, out):
    """Runs gpipe-opt, binding inputs it needs at compile time to the data."""
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    initializers = {t.name for t in model.graph.initializer}
    runtime_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    bindings = []
    while True:
        proc = subprocess.run([gpipe_opt, os.path.join(test_dir, "model.onnx"),
                               "--emit=nn", "-o", out] + bindings,
                              capture_output=True, text=True, timeout=120)
        match = NEEDS_CONSTANT.search(proc.stderr)
        if proc.returncode == 0 or not match or match.group(1) not in runtime_inputs:
            return proc
        index = runtime_inputs.index(match.group(1))
        data = os.path.join(test_dir, "test_data_set_0", f"input_{index}.pb")
        binding = f"--const-input={match.group(1)}={data}"
        if binding in bindings:
            return proc
        bindings.append(binding)


def main():
    gpipe_opt, data, work = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    selected, failures, rejected = 0, [], 0
    supported = supported_ops(gpipe_opt)
    for name in sorted(os.listdir(data)):
        path = os.path.join(data, name, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path)
        ops = {n.op_type for n in model.graph.node}
        if not ops or not ops <= supported or any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            continue
        selected += 1
        proc = compile_test(gpipe_opt, os.path.join(data, name),
                            os.path.join(work, name + ".mlir"))
        if name in EXPECTED_REJECTIONS:
            rejected += 1
            if proc.returncode == 0 or len(proc.stderr.strip().splitlines()) != 1:
                failures.append(f"{name}: expected a one-line rejection "
                                f"({EXPECTED_REJECTIONS[name]}), got exit "
                                f"{proc.returncode}: {proc.stderr.strip()}")
            continue
        if proc.returncode != 0:
            failures.append(f"{name}: {proc.stderr.strip()}")
            continue
        # The printed IR must parse back.
        back = subprocess.run([gpipe_opt, os.path.join(work, name + ".mlir"),
                               "-o", os.devnull], capture_output=True, text=True)
        if back.returncode != 0:
            failures.append(f"{name}: output does not parse back: {back.stderr.strip()}")
    print(f"{selected} node tests selected, {selected - rejected - len(failures)} imported, "
          f"{rejected} rejected by design, {len(failures)} failed")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures or selected == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
