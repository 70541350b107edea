"""Rewrites a bundle so that no phase output says which kernel writes it.

Usage: strip_written_by.py BUNDLE OUT

Copies BUNDLE to OUT without the `written_by` of every phase output, with
the manifest's checksum updated: the runtime then sums every gradient
apart (a copy of the first micro-batch's, the others added), where BUNDLE
has the products of the weights' gradients add into the sum themselves.
Prints, per stage and phase, the outputs it found marked.
"""
import json
import shutil
import sys
import zlib


def main():
    src, out = sys.argv[1], sys.argv[2]
    shutil.copytree(src, out)
    with open(f"{src}/manifest.json") as f:
        m = json.load(f)
    for k, stage in enumerate(m["stages"]):
        for phase in stage["phases"]:
            marked = [o["name"] for o in phase["outputs"]
                      if o.pop("written_by", None) is not None]
            print(f"stage {k} {phase['role']}: {' '.join(marked)}")
    text = json.dumps(m)
    with open(f"{out}/manifest.json", "w") as f:
        f.write(text)
    with open(f"{out}/manifest.crc32", "w") as f:
        f.write(str(zlib.crc32(text.encode())))


if __name__ == "__main__":
    main()
