"""Imports every ONNX backend node test (libonnx-testdata) made only of ops
gpipe accepts, and checks that each imports without error.

A test is selected when every node of its model has an op type the importer
lists as supported (gpipe-opt --print-onnx-ops). gpipe compiles static
programs, so graph inputs that an op needs at compile time (a Reshape's
shape, Slice bounds, ...) are bound to the test's input data with
--const-input, as a user would bind them. Tests that use a
feature gpipe rejects on purpose are listed in EXPECTED_REJECTIONS with the
reason, and must still be refused with a clean one-line error.

The printed IR of all imported tests is parsed back by one gpipe-opt
(--split-input-file); where that fails each file is parsed alone to name
the test.

With --sample only the first test of each distinct set of op types runs,
and every test listed below: the sanitizer builds (scripts/
check-sanitizers.sh) take that, a few hundred imports where every import
costs several times more, instead of every test.

usage: backend_node_tests.py GPIPE_OPT TESTDATA_DIR WORK_DIR [--sample]
"""
import os
import subprocess
import sys

import onnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import onnx_testdata  # noqa: E402

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
    "test_reduce_sum_default_axes_keepdims_example": "zero-sized tensors (empty axes input)",
    "test_reduce_sum_default_axes_keepdims_random": "zero-sized tensors (empty axes input)",
    "test_reduce_sum_empty_axes_input_noop_example": "zero-sized tensors (empty axes input)",
    "test_reduce_sum_empty_axes_input_noop_random": "zero-sized tensors (empty axes input)",
    "test_reduce_sum_negative_axes_keepdims_random": "zero-sized tensors (empty axes input)",
    "test_split_zero_size_splits": "zero-sized tensors",
    "test_tril_zero": "zero-sized tensors",
    "test_triu_zero": "zero-sized tensors",
    "test_training_dropout_default_mask": "random dropout mask as an output",
    "test_training_dropout_mask": "random dropout mask as an output",
}

# Tests of supported ops that use modes not implemented yet (each refused
# with one line saying so; docs/ops.md).
NOT_YET = {"test_resize_tf_crop_and_resize": "Resize tf_crop_and_resize"}


def parse_back(gpipe_opt, work, names):
    """The printed IR of each test must parse back: one gpipe-opt over all
    of them, then one per file where that fails."""
    if not names:
        return []
    joined = os.path.join(work, "all-imported.mlir")
    with open(joined, "w") as out:
        for i, name in enumerate(names):
            if i:
                out.write("\n// -----\n")
            with open(os.path.join(work, name + ".mlir")) as f:
                out.write(f.read())
    back = subprocess.run([gpipe_opt, joined, "--split-input-file",
                           "-o", os.devnull], capture_output=True, text=True)
    if back.returncode == 0:
        return []
    failures = []
    for name in names:
        one = subprocess.run([gpipe_opt, os.path.join(work, name + ".mlir"),
                              "-o", os.devnull], capture_output=True, text=True)
        if one.returncode != 0:
            failures.append(f"{name}: output does not parse back: "
                            f"{one.stderr.strip()}")
    return failures or [f"{joined}: does not parse back as a whole: "
                        f"{back.stderr.strip()[:2000]}"]


def main():
    args = [a for a in sys.argv[1:] if a != "--sample"]
    sample = len(args) != len(sys.argv) - 1
    if len(args) != 3:
        sys.exit(__doc__)
    gpipe_opt, data, work = args
    os.makedirs(work, exist_ok=True)
    selected, failures, rejected, not_yet = 0, [], 0, 0
    supported = onnx_testdata.supported_ops(gpipe_opt)
    seen_op_sets = set()
    imported = []
    for name in sorted(os.listdir(data)):
        path = os.path.join(data, name, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path)
        ops = {n.op_type for n in model.graph.node}
        if not ops or not ops <= supported or any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            continue
        if sample and name not in EXPECTED_REJECTIONS and name not in NOT_YET:
            if frozenset(ops) in seen_op_sets:
                continue
            seen_op_sets.add(frozenset(ops))
        selected += 1
        proc, _, _ = onnx_testdata.compile_with_bindings(
            gpipe_opt, os.path.join(data, name), model,
            ["--emit=nn", "-o", os.path.join(work, name + ".mlir")], 120)
        if name in EXPECTED_REJECTIONS or name in NOT_YET:
            why = EXPECTED_REJECTIONS.get(name) or NOT_YET[name]
            if name in NOT_YET:
                not_yet += 1
            else:
                rejected += 1
            stderr = proc.stderr.strip()
            if (proc.returncode == 0 or len(stderr.splitlines()) != 1 or
                    (name in NOT_YET and "not implemented yet" not in stderr)):
                failures.append(f"{name}: expected a one-line rejection "
                                f"({why}), got exit "
                                f"{proc.returncode}: {stderr}")
            continue
        if proc.returncode != 0:
            failures.append(f"{name}: {proc.stderr.strip()}")
            continue
        imported.append(name)
    failures += parse_back(gpipe_opt, work, imported)
    print(f"{selected} node tests selected, "
          f"{selected - rejected - not_yet - len(failures)} imported, "
          f"{rejected} rejected by design, {not_yet} not implemented yet, "
          f"{len(failures)} failed")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures or selected == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
