"""Checks the stages of `gpipe-opt --emit=stages` (standard input) for their
backward's split: each stage's gpipe.backward_weight_time (its weights'
gradients, a zero-bubble schedule's W) is at least 0 and at most its
gpipe.backward_time, and more than 0 (every stage of the test's MLP trains
a product); it prints each stage's W over its backward.

usage: gpipe-opt ... --emit=stages | check_backward_split.py STAGES"""
import re
import sys

text = sys.stdin.read()
number = r"([0-9.]+(?:[eE][-+]?[0-9]+)?)"
total = [float(v) for v in re.findall(r"gpipe\.backward_time = " + number,
                                      text)]
weight = [float(v) for v in
          re.findall(r"gpipe\.backward_weight_time = " + number, text)]
stages = int(sys.argv[1])
assert len(total) == stages and len(weight) == stages, (total, weight)
for s, (t, w) in enumerate(zip(total, weight)):
    assert 0 < w <= t, f"stage {s}: W {w} of a backward of {t}"
print(f"{stages} stages, W of the backward: " +
      ", ".join(f"{w / t:.2f}" for t, w in zip(total, weight)))
