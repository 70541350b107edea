"""Exports a model with BatchNorm and Dropout in training mode (export), or
checks the model gpipe-run --save-onnx wrote from it (check): an inference
model, BatchNormalization with training_mode=0 and one output, Dropout
without its training_mode input, valid for onnx.checker, and deterministic
under ONNX's reference evaluator (dropout off) with the trained running
statistics used.

    save_onnx_modes.py export MODEL.onnx DATA.npz
    save_onnx_modes.py check TRAINED.onnx
    save_onnx_modes.py check-training TRAINING.onnx TRAINED.onnx

check-training: the --save-onnx-training model keeps BatchNormalization's
training_mode=1 and its three outputs and Dropout's training_mode input,
with the same trained initializers as the inference model of the same
run.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

if sys.argv[1] == "export":
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
        torch.nn.Dropout(0.5), torch.nn.Linear(16, 3)).train()
    torch.onnx.export(model, torch.randn(8, 6), sys.argv[2], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["x"])
    rng = np.random.default_rng(2)
    np.savez(sys.argv[3], x=rng.standard_normal((32, 6), dtype=np.float32),
             labels=rng.integers(0, 3, 32))
    sys.exit(0)

if sys.argv[1] == "check-training":
    kept, inference = onnx.load(sys.argv[2]), onnx.load(sys.argv[3])
    onnx.checker.check_model(kept)
    nodes = {n.op_type: n for n in kept.graph.node}
    bn, dropout = nodes["BatchNormalization"], nodes["Dropout"]
    assert [a.i for a in bn.attribute if a.name == "training_mode"] == [1]
    assert len(bn.output) == 3, list(bn.output)
    assert len(dropout.input) == 3, list(dropout.input)
    a = {t.name: numpy_helper.to_array(t) for t in kept.graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in inference.graph.initializer}
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    print("training model ok")
    sys.exit(0)

model = onnx.load(sys.argv[2])
onnx.checker.check_model(model)
nodes = {n.op_type: n for n in model.graph.node}
bn, dropout = nodes["BatchNormalization"], nodes["Dropout"]
mode = [a.i for a in bn.attribute if a.name == "training_mode"]
assert mode in ([], [0]), mode
assert len(bn.output) == 1, list(bn.output)
assert len(dropout.input) <= 2, list(dropout.input)
inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
mean = [v for k, v in inits.items() if k.endswith("running_mean")][0]
assert np.abs(mean).max() > 0, "running mean not trained"
try:
    from onnx.reference import ReferenceEvaluator
except ImportError:
    print("inference model ok (no onnx.reference to run it)")
    sys.exit(0)
x = np.random.default_rng(3).standard_normal((8, 6), dtype=np.float32)
run = ReferenceEvaluator(model)
a, b = run.run(None, {"x": x})[0], run.run(None, {"x": x})[0]
assert np.array_equal(a, b), "dropout still on"
print("inference model ok")
