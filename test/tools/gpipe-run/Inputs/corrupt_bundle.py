"""Makes a damaged copy of a bundle: corrupt_bundle.py SRC DST HOW.

HOW: flip-params, flip-code, truncate-manifest, flip-manifest,
other-version, missing-code, too-many-cores, bad-sender, arena-of,
stash-dtype. Those that
rewrite the manifest give it a valid checksum, as a bundle of another
version or for another machine would have; bad-sender points stage 1's
received activation at a forward output stage 0 does not have; arena-of
has stage 0's backward share the arena of a phase that does not exist;
stash-dtype keeps stage 0's first stashed tensor in a type that is none.
"""
import json
import shutil
import sys

src, dst, how = sys.argv[1:4]
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst)


def flip(path, at):
    data = bytearray(open(path, "rb").read())
    data[at % len(data)] ^= 0x40
    open(path, "wb").write(bytes(data))


manifest_path = dst + "/manifest.json"
if how == "flip-params":
    flip(dst + "/stage0.params", 5)
elif how == "flip-code":
    flip(dst + "/stage0.so", 1000)
elif how == "truncate-manifest":
    text = open(manifest_path).read()
    open(manifest_path, "w").write(text[: len(text) // 2])
elif how in ("other-version", "too-many-cores", "bad-sender", "kernel-contract",
             "param-kind", "arena-of", "stash-dtype"):
    manifest = json.load(open(manifest_path))
    if how == "other-version":
        manifest["version"] = 99
    elif how == "kernel-contract":
        del manifest["stages"][0]["phases"][0]["kernels"][0]["attributes"]["group"]
    elif how == "param-kind":
        manifest["stages"][0]["parameters"]["tensors"][0]["kind"] = "trainable"
    elif how == "bad-sender":
        wiring = manifest["stages"][1]["wiring"]
        wiring["recv_activations"]["tensors"][0]["sender_output"] = 99
    elif how == "stash-dtype":
        wiring = manifest["stages"][0]["wiring"]
        next(c for c in wiring["carried"]
             if c["from"] != "batch")["stash_dtype"] = "f16"
    elif how == "arena-of":
        for phase in manifest["stages"][0]["phases"]:
            if phase["role"] == "backward":
                phase["arena_of"] = "recompute"
    else:
        manifest["devices"] = ["cpu:100000"]
    text = json.dumps(manifest)
    open(manifest_path, "w").write(text)
    import zlib
    open(dst + "/manifest.crc32", "w").write(f"{zlib.crc32(text.encode())}\n")
elif how == "flip-manifest":
    text = open(manifest_path).read()
    open(manifest_path, "w").write(text.replace('"offset": 0', '"offset": 8', 1))
elif how == "missing-code":
    import os
    os.remove(dst + "/stage0.so")
else:
    sys.exit("unknown damage " + how)
