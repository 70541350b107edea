"""Checks a --precision=bf16 bundle's stash against its fp32 twin:
check_bf16_stash.py BF16.gpipe FP32.gpipe

Every carried tensor marked stash_dtype "bf16" is a float32 tensor given
half its bytes (rounded up to 4) in the stash, the entries laid one after
the other; the stash of each stage is smaller than the fp32 bundle's and
the same where nothing is marked. Prints one line per stage.
"""
import json
import sys


def stages(path):
    with open(path + "/manifest.json") as f:
        return json.load(f)["stages"]


for bf, fp in zip(stages(sys.argv[1]), stages(sys.argv[2])):
    backward = next(p for p in bf["phases"] if p["role"] == "backward")
    inputs = backward["inputs"]
    offset, marked = 0, 0
    for c in bf["wiring"]["carried"]:
        if c["from"] == "batch":
            continue
        slot = inputs[c["input"]]
        n = 1
        for d in slot["shape"]:
            n *= d
        size = {"float32": 4, "int64": 8, "uint8": 1, "f32": 4}.get(
            slot["dtype"], 4) * n
        assert c["stash_offset"] == offset, (c, offset)
        if c.get("stash_dtype") == "bf16":
            assert slot["dtype"] in ("float32", "f32"), slot
            assert slot.get("stash_dtype") == "bf16", slot
            size = (size // 2 + 3) // 4 * 4
            marked += 1
        offset += size
    assert offset == bf["wiring"]["stash_bytes"], (offset, bf["wiring"])
    fp_bytes = fp["wiring"]["stash_bytes"]
    assert (bf["wiring"]["stash_bytes"] < fp_bytes) == (marked > 0)
    print("stage %d: %d of %d kept tensors in bfloat16, stash %d bytes "
          "(fp32 %d)" % (bf["index"], marked, len(bf["wiring"]["carried"]),
                         bf["wiring"]["stash_bytes"], fp_bytes))
