"""Reads or edits the turns of an interleaved bundle's schedule.

usage: interleaved_manifest.py BUNDLE show|ops
       interleaved_manifest.py BUNDLE repeat|group|split|rank
  show: each stream's device, device group and its compute instructions'
        turns, one line per stream;
  ops: each stream's compute instructions in order, F, B (a backward or
       its input part), W (its weight part) and R (a recompute) with the
       micro-batch, in the order of the device's turns;
  repeat: stage 1's first turn made its second's (a turn out of order);
  group: stage 1 put in stage 0's device group (a group over two devices);
  split: device group 0's last turn moved on by one (turns that skip);
  rank: stage 2 moved to rank 1 (its device group's stage 0 on rank 0).
An edit rewrites manifest.crc32 so that only the edit is wrong.
"""
import json
import os
import sys
import zlib

COMPUTE = ("forward", "recompute", "backward", "backward_input",
           "backward_weight")


def main():
    bundle, what = sys.argv[1:3]
    path = os.path.join(bundle, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    streams = manifest["schedule"]["streams"]
    if what == "show":
        print(manifest["schedule"]["kind"])
        for s in streams:
            turns = [i[2] for i in s["instructions"] if i[0] in COMPUTE]
            print(f"stage {s['stage']} {s['device']} group "
                  f"{s.get('device_group', '-')} turns {turns}")
        return 0
    if what == "ops":
        letter = {"forward": "F", "recompute": "R", "backward": "B",
                  "backward_input": "B", "backward_weight": "W"}
        for s in streams:
            ops = [f"{letter[i[0]]}{i[1]}" for i in s["instructions"]
                   if i[0] in COMPUTE]
            print(f"stage {s['stage']} " + " ".join(ops))
        return 0
    if what == "repeat":
        compute = [i for i in streams[1]["instructions"] if i[0] in COMPUTE]
        compute[0][2] = compute[1][2]
    elif what == "group":
        streams[1]["device_group"] = streams[0]["device_group"]
    elif what == "split":
        group = streams[0]["device_group"]
        last = max((i for s in streams if s.get("device_group") == group
                    for i in s["instructions"] if i[0] in COMPUTE),
                   key=lambda i: i[2])
        last[2] += 1
    elif what == "rank":
        manifest["stages"][2]["rank"] = 1
    else:
        raise SystemExit(f"unknown edit {what}")
    text = json.dumps(manifest)
    with open(path, "w") as f:
        f.write(text)
    with open(os.path.join(bundle, "manifest.crc32"), "w") as f:
        f.write("%d" % zlib.crc32(text.encode()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
