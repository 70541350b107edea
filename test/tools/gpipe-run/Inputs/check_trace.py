"""Checks a gpipe-run --trace file: kernels named by their ONNX node with
their kind and phase, the runtime's own parts (category "runtime": stash
copies, messages, ...) inside the instructions they belong to,
instructions with step, micro-batch and bytes, one arrow per message from
its send to its receive, and a marker per step.

    check_trace.py TRACE.json STEPS MICRO_BATCHES
"""
import json
import sys

path, steps, micro_batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = json.load(open(path))["traceEvents"]
slices = [e for e in events if e["ph"] == "X"]
kernels = [e for e in slices if e["cat"] == "kernel"]
names = {e["name"] for e in kernels}
assert "fc1 (gemm)" in names and "fc2 (gemm)" in names, names
fc1 = next(e for e in kernels if e["name"] == "fc1 (gemm)")
assert fc1["args"]["node"] == "fc1" and fc1["args"]["kernel"] == "gemm", fc1
assert {e["args"]["phase"] for e in kernels} >= {"forward", "backward"}

# The runtime's parts: messages filled and emptied on both stages, each
# inside an instruction of its own track.
runtime = [e for e in slices if e["cat"] == "runtime"]
assert {"messages", "stash copies"} <= {e["name"] for e in runtime}, \
    {e["name"] for e in runtime}
instructions = [e for e in slices if e["cat"] == "instruction"]
for r in runtime:
    assert r["args"]["phase"] == "runtime" and any(
        i["tid"] == r["tid"] and i["ts"] <= r["ts"] and
        r["ts"] + r["dur"] <= i["ts"] + i["dur"] + 1e-3
        for i in instructions), r
assert len({e["tid"] for e in runtime if e["name"] == "messages"}) == 2

sends = [e for e in slices if e["name"].startswith("send_")]
for e in sends:
    assert e["args"]["bytes"] > 0 and 0 <= e["args"]["micro_batch"] < \
        micro_batches and 1 <= e["args"]["step"] <= steps, e
starts = {e["id"]: e for e in events if e["ph"] == "s"}
finishes = {e["id"]: e for e in events if e["ph"] == "f"}
# Two stages: every micro-batch sends an activation and a gradient a step.
assert len(starts) == 2 * micro_batches * steps, len(starts)
assert starts.keys() == finishes.keys(), "an arrow without its other end"
for i, s in starts.items():
    f = finishes[i]
    assert f["tid"] != s["tid"] and f["bp"] == "e", (s, f)

markers = sorted(e["name"] for e in events if e["ph"] == "i")
assert markers == sorted(f"step {k + 1}" for k in range(steps)), markers
print(f"trace ok: {len(kernels)} kernels, {len(runtime)} runtime parts, "
      f"{len(starts)} arrows, "
      f"{len(markers)} step markers")
