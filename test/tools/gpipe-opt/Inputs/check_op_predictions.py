"""Checks a training bundle's per-op predictions (predicted_ops in each
schedule stream) against the ops gpipe-run --profile-ops timed: every timed
op of the model has a prediction, every prediction is a finite time of at
least 0, and a stage's ops' predicted forwards sum to no more than its
predicted forward box (which adds the stage's own terms to them).

usage: check_op_predictions.py BUNDLE OPS.csv"""
import csv
import json
import math
import os
import sys

bundle, table = sys.argv[1:3]
manifest = json.load(open(os.path.join(bundle, "manifest.json")))
predicted = {}
for stream in manifest["schedule"]["streams"]:
    ops = stream["predicted_ops"]
    assert ops, f"stage {stream['stage']} has no predicted ops"
    for name, forward, backward in ops:
        assert math.isfinite(forward) and forward >= 0, name
        assert math.isfinite(backward) and backward >= 0, name
        # A name spanning a cut: its stages' parts add up.
        f0, b0 = predicted.get(name, (0.0, 0.0))
        predicted[name] = (f0 + forward, b0 + backward)
    boxes = [end - begin for what, mb, begin, end in
             stream["predicted_timeline"] if what == "forward" and mb == 0]
    total = sum(f for _, f, _ in ops)
    assert boxes and total <= boxes[0] + 1e-12, (total, boxes)
timed = [row["op"] for row in csv.DictReader(open(table))
         if not row["op"].startswith("(runtime)")]
missing = [op for op in timed if op not in predicted]
assert not missing, f"timed ops without a prediction: {missing}"
print(f"{len(timed)} timed ops, each predicted")
