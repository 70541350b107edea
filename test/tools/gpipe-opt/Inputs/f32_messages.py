"""Rewrites a bundle so that every activation message carries float32.

Usage: f32_messages.py BUNDLE OUT

Copies BUNDLE to OUT and lays each stage's send_activations and
recv_activations out again without `dtype: "bf16"` (every tensor at its
float32 size, in the sender's order), with the manifest's checksum
updated: the same training as BUNDLE's where the bfloat16 messages lose
nothing. Prints how many tensors it widened.
"""
import json
import math
import shutil
import sys
import zlib

SIZES = {"float32": 4, "int64": 8, "int32": 4, "bool": 1, "int8": 1, "uint8": 1}


def nbytes(slot):
    return math.prod(slot["shape"]) * SIZES[slot["dtype"]]


def main():
    src, out = sys.argv[1], sys.argv[2]
    shutil.copytree(src, out)
    with open(f"{src}/manifest.json") as f:
        m = json.load(f)
    widened = 0
    stages = m["stages"]
    for k, stage in enumerate(stages):
        fwd = next(p for p in stage["phases"] if p["role"] == "forward")
        send = stage["wiring"]["send_activations"]
        offsets, offset = {}, 0
        for t in send["tensors"]:
            widened += t.pop("dtype", "f32") == "bf16"
            t["offset"] = offset
            offsets[t["output"]] = offset
            offset += nbytes(fwd["outputs"][t["output"]])
        send["bytes"] = offset
        if k + 1 < len(stages):
            recv = stages[k + 1]["wiring"]["recv_activations"]
            for t in recv["tensors"]:
                t.pop("dtype", None)
                t["offset"] = offsets[t["sender_output"]]
            recv["bytes"] = offset
    text = json.dumps(m)
    with open(f"{out}/manifest.json", "w") as f:
        f.write(text)
    with open(f"{out}/manifest.crc32", "w") as f:
        f.write(str(zlib.crc32(text.encode())))
    print(f"widened {widened} message tensors")


if __name__ == "__main__":
    main()
