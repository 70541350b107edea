"""Feeds gpipe-opt malformed ONNX files and checks that each is refused cleanly.

Every case must exit with a code in 1..127 (no signal, no abort), print
exactly one line on stderr that says "error:", print no sanitizer report,
and leave no output file behind.

usage: malformed_models.py GPIPE_OPT WORK_DIR
"""
import os
import random
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def vi(name, shape, dtype=FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, inits=(), opset=13, ir=8, domain_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", opset)] + list(domain_opsets)
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = ir
    return m.SerializeToString()


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def rand(*shape):
    return np.random.RandomState(0).randn(*shape).astype(np.float32)


X23 = [vi("x", [2, 3])]
Y = [vi("y", None)]


def relu_model(**kw):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], X23, Y, **kw)


def conv_model(attrs=None, w_shape=(4, 2, 3, 3), x_shape=(1, 2, 5, 5)):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **(attrs or {}))
    return model([node], [vi("x", list(x_shape))], Y, [init("w", rand(*w_shape))])


def node_model(op, inputs, attrs=None, inits=(), in_vis=None, outputs=("y",), opset=13):
    node = helper.make_node(op, inputs, list(outputs), name=op.lower(), **(attrs or {}))
    return model([node], in_vis if in_vis is not None else X23,
                 [vi(o, None) for o in outputs], inits, opset=opset)


def with_graph(mutate):
    m = onnx.load_from_string(relu_model())
    mutate(m)
    return m.SerializeToString()


def cases():
    valid = model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
                  [vi("x", [4, 16])], Y, [init("w", rand(8, 16)), init("b", rand(8))])
    rng = random.Random(1234)
    yield "empty_file", b""
    for i in range(3):
        yield f"random_bytes_{i}", bytes(rng.getrandbits(8) for _ in range(64 << i))
    for frac in (0.1, 0.5, 0.9):
        yield f"truncated_{int(frac * 100)}pct", valid[: int(len(valid) * frac)]
    yield "truncated_last_byte", valid[:-1]
    yield "text_file", b'{"model": "not protobuf"}\n'
    # A graph field (7) nested in itself far deeper than any real model.
    nested = b""
    for _ in range(200):
        nested = b"\x3a" + bytes([len(nested)]) + nested if len(nested) < 127 else b"\x3a\x7f" + nested[:127]
    yield "deep_nesting", b"\x08\x08" + nested
    yield "attr_strides_float", conv_model({"strides": 2.0})
    yield "attr_transB_string", node_model("Gemm", ["x", "x"], {"transB": "yes"})
    yield "attr_axis_ints", node_model("Softmax", ["x"], {"axis": [0, 1]})
    yield "missing_initializer", node_model("Add", ["x", "w"])
    yield "dangling_input", model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], X23, Y)
    yield "cycle", model([helper.make_node("Add", ["x", "b"], ["a"], name="a"),
                          helper.make_node("Relu", ["a"], ["b"], name="b"),
                          helper.make_node("Relu", ["b"], ["y"], name="c")], X23, Y)
    yield "two_producers", model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                  helper.make_node("Tanh", ["x"], ["y"], name="b")], X23, Y)
    yield "matmul_inner_mismatch", node_model("MatMul", ["x", "w"], inits=[init("w", rand(4, 5))])
    yield "add_not_broadcastable", node_model("Add", ["x", "w"], inits=[init("w", rand(4))])
    yield "reshape_wrong_count", node_model("Reshape", ["x", "s"], inits=[init("s", np.array([4, 4], np.int64))])
    yield "reshape_two_minus_one", node_model("Reshape", ["x", "s"], inits=[init("s", np.array([-1, -1], np.int64))])
    yield "conv_kernel_too_large", conv_model(w_shape=(4, 2, 7, 7))
    yield "conv_channel_mismatch", conv_model(w_shape=(4, 3, 3, 3))
    yield "concat_mismatch", node_model("Concat", ["x", "w"], {"axis": 0}, inits=[init("w", rand(2, 4))])
    yield "concat_missing_axis", node_model("Concat", ["x", "x"])
    yield "maxpool_missing_kernel", node_model("MaxPool", ["x"], in_vis=[vi("x", [1, 2, 4, 4])])
    yield "gemm_bad_bias", node_model("Gemm", ["x", "w", "c"], inits=[init("w", rand(3, 4)), init("c", rand(7))])
    yield "split_bad_sizes", node_model("Split", ["x", "s"], {"axis": 1}, inits=[init("s", np.array([1, 1], np.int64))], outputs=("a", "b"))
    yield "slice_zero_step", node_model("Slice", ["x", "s", "e", "a", "st"], inits=[
        init("s", np.array([0], np.int64)), init("e", np.array([2], np.int64)),
        init("a", np.array([0], np.int64)), init("st", np.array([0], np.int64))])
    yield "gather_out_of_range", node_model("Gather", ["x", "i"], {"axis": 1}, inits=[init("i", np.array([5], np.int64))])
    yield "transpose_bad_perm", node_model("Transpose", ["x"], {"perm": [0, 0]})
    yield "squeeze_non_unit", node_model("Squeeze", ["x", "a"], inits=[init("a", np.array([0], np.int64))])
    yield "pad_crops_below_zero", node_model("Pad", ["x", "p"], inits=[init("p", np.array([0, -4, 0, 0], np.int64))])
    yield "constant_of_shape_huge", node_model("ConstantOfShape", ["s"], in_vis=[], inits=[init("s", np.array([1 << 30, 1 << 30], np.int64))])
    yield "range_huge", node_model("Range", ["a", "b", "c"], in_vis=[], inits=[
        init("a", np.array(0, np.int64)), init("b", np.array(1 << 62, np.int64)), init("c", np.array(1, np.int64))])
    yield "opset_0", relu_model(opset=0)
    yield "opset_negative", relu_model(opset=-3)
    yield "opset_18", relu_model(opset=18)
    yield "opset_1000", relu_model(opset=1000)
    yield "no_default_opset", with_graph(lambda m: (m.ClearField("opset_import"), m.opset_import.extend([helper.make_opsetid("com.example", 1)])))
    yield "ir_version_0", relu_model(ir=0)
    yield "ir_version_99", relu_model(ir=99)
    yield "no_graph", with_graph(lambda m: m.ClearField("graph"))
    yield "no_nodes", with_graph(lambda m: m.graph.ClearField("node"))
    yield "no_outputs", with_graph(lambda m: m.graph.ClearField("output"))
    yield "input_without_shape", with_graph(lambda m: m.graph.input[0].type.tensor_type.ClearField("shape"))
    yield "input_string_type", with_graph(lambda m: setattr(m.graph.input[0].type.tensor_type, "elem_type", TensorProto.STRING))
    yield "input_negative_dim", with_graph(lambda m: setattr(m.graph.input[0].type.tensor_type.shape.dim[0], "dim_value", -3))
    yield "input_huge_dims", with_graph(lambda m: [setattr(d, "dim_value", 1 << 40) for d in m.graph.input[0].type.tensor_type.shape.dim])
    yield "input_not_tensor", with_graph(lambda m: m.graph.input[0].type.ClearField("tensor_type"))
    bad_raw = init("w", rand(2, 3))
    bad_raw.raw_data = bad_raw.raw_data[:-4]
    yield "raw_data_short", node_model("Add", ["x", "w"], inits=[bad_raw])
    neg = init("w", rand(2, 3))
    neg.dims[0] = -2
    yield "initializer_negative_dim", node_model("Add", ["x", "w"], inits=[neg])
    empty_huge = helper.make_tensor("w", TensorProto.FLOAT, [0, 1 << 62, 1 << 62], [])
    yield "initializer_empty_huge_dims", node_model("Add", ["x", "w"], inits=[empty_huge])
    yield "initializer_string", node_model("Add", ["x", "w"], inits=[helper.make_tensor("w", TensorProto.STRING, [1], [b"a"])])
    yield "unsupported_op", node_model("NonMaxSuppression", ["x"])
    yield "unknown_domain", model([helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")], X23, Y,
                                  domain_opsets=[helper.make_opsetid("com.example", 1)])
    yield "declared_output_mismatch", model([helper.make_node("Relu", ["x"], ["y"], name="r")], X23, [vi("y", [3, 2])])
    yield "unknown_attribute", node_model("Relu", ["x"], {"beta": 1.0})
    yield "cast_to_string", node_model("Cast", ["x"], {"to": TensorProto.STRING})
    yield "huge_attribute_values", conv_model({"pads": [1 << 62, 1 << 62, 1 << 62, 1 << 62]})


def main():
    gpipe_opt, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures, count = [], 0
    for name, data in cases():
        count += 1
        path = os.path.join(work, name + ".onnx")
        out = os.path.join(work, name + ".mlir")
        with open(path, "wb") as f:
            f.write(data)
        if os.path.exists(out):
            os.remove(out)
        proc = subprocess.run([gpipe_opt, path, "--emit=nn", "-o", out],
                              capture_output=True, text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        problems = []
        if not 1 <= proc.returncode <= 127:
            problems.append(f"exit code {proc.returncode}")
        if len(lines) != 1 or "error:" not in lines[0]:
            problems.append(f"stderr is not one error line: {proc.stderr!r}")
        if "Sanitizer" in proc.stderr or "runtime error" in proc.stderr:
            problems.append("sanitizer report")
        if os.path.exists(out):
            problems.append("an output file was written")
        status = "FAIL" if problems else "ok"
        print(f"{status:4} {name}: {lines[0] if lines else ''}")
        if problems:
            failures.append(f"{name}: {'; '.join(problems)}")
    print(f"{count} malformed models, {len(failures)} not refused cleanly")
    for f in failures:
        print("  " + f)
    if count < 30:
        print("expected at least 30 cases")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
