"""Checks that a stage sharing its device sends what a compute instruction
made before the device's next compute instruction starts, from a gpipe-run
--trace file of an interleaved bundle: the stage holds the device's turn
through the sends that follow its instruction.

    check_turns.py BUNDLE TRACE.json
"""
import collections
import json
import os
import sys

COMPUTE = ("forward", "recompute", "backward", "backward_input",
           "backward_weight")
SENDS = ("send_activation", "send_gradient")

bundle, trace = sys.argv[1:3]
with open(os.path.join(bundle, "manifest.json")) as f:
    streams = json.load(f)["schedule"]["streams"]
group = {s["stage"]: s["device_group"] for s in streams}
with open(trace) as f:
    events = json.load(f)["traceEvents"]
instructions = [e for e in events
                if e["ph"] == "X" and e["cat"] == "instruction"]
by = collections.defaultdict(list)  # (step, stage) -> in stream order
for e in instructions:
    by[(e["args"]["step"], e["args"]["stage"])].append(e)
checked = 0
for (step, stage), stream in by.items():
    stream.sort(key=lambda e: e["ts"])
    # Every compute instruction of the device in that step, by start.
    device = sorted((e for (t, s), l in by.items()
                     if t == step and group[s] == group[stage] for e in l
                     if e["name"].split()[0] in COMPUTE),
                    key=lambda e: e["ts"])
    for i, e in enumerate(stream):
        if e["name"].split()[0] not in COMPUTE:
            continue
        sends = []
        for n in stream[i + 1:]:
            if n["name"].split()[0] not in SENDS:
                break
            sends.append(n)
        if not sends:
            continue
        later = [d for d in device if d["ts"] > e["ts"]]
        if not later:
            continue
        nxt = later[0]
        last = sends[-1]
        if last["ts"] + last["dur"] > nxt["ts"]:
            sys.exit(f"step {step}: stage {stage}'s {last['name']} (after its "
                     f"{e['name']}) ended {last['ts'] + last['dur'] - nxt['ts']:.1f}"
                     f" us after stage {nxt['args']['stage']}'s {nxt['name']} "
                     f"began on the device")
        checked += 1
assert checked > 0, "no compute instruction followed by a send"
print(f"turns ok: {checked} sends before the device's next instruction")
