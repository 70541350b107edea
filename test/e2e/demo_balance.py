"""The main job's model (examples/fashion_mnist_cnn.py) cut for two cores
as scripts/demo.sh cuts it: the partitioner gives each stage about the same
work, the second stage not a sliver (forward + backward of the heavier
stage at most 1.25 times the lighter's), each stage gets one of the two
convolution blocks, and the report compares the pipeline with one stage on
both cores (not with one core running the same micro-batches). (The
example's earlier CNN put 3 of 11 layers and 320 of its parameters in
stage 0: 0.69 against 1.68 ms forward.) Then 30 steps of the
pipeline and of one device at the same 8 micro-batches (BatchNorm
normalizes each micro-batch) on Fashion-MNIST, whose losses agree (1e-5).

    demo_balance.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import os
import re
import subprocess
import sys

gpipe_opt, gpipe_run, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
root = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
onnx_path = os.path.join(work, "cnn.onnx")
subprocess.run([sys.executable,
                os.path.join(root, "examples", "fashion_mnist_cnn.py"),
                "--output", onnx_path], check=True, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
common = ["--batch-size=64", "--optimizer=sgd", "--lr=0.05", "--momentum=0.9"]
pipe = os.path.join(work, "pipe.gpipe")
text = subprocess.run([gpipe_opt, onnx_path, "--devices=cpu:0,cpu:1",
                       "--micro-batches=8", "-o", pipe] + common, check=True,
                      capture_output=True, text=True).stdout
print(text)
rows = re.findall(r"^(\d+)\s+cpu:\d\s+\[(\d+), (\d+)\)\s+(\d+)\s+(\d+)\s+"
                  r"[\d.]+\s+([\d.]+)\s+([\d.]+)", text, re.M)
failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        failures.append(name)


check("two stages", len(rows) == 2, str(rows))
if len(rows) == 2:
    work_ms = [float(r[5]) + float(r[6]) for r in rows]
    check("stages balanced within 1.25x",
          max(work_ms) <= 1.25 * min(work_ms), str(work_ms))
    # Layers: conv, bn, relu, conv, bn, relu, pool (block 1), then block 2.
    check("a convolution block per stage",
          6 <= int(rows[0][2]) <= 8, "cut before layer " + rows[0][2])
alternative = re.search(r"^one stage on all the cores \(cpu:0-1, \d+ "
                        r"micro-batch(es)?\): [\d.e-]+ ms a step predicted; "
                        r"this plan is predicted ([\d.]+x (as fast|slower)|"
                        r"as fast \(within 0\.5%\))$",
                        text, re.M)
check("compared with one stage on both cores", alternative is not None, text)
check("no speed-up over one core announced", "speed-up" not in text, text)

one = os.path.join(work, "one.gpipe")
subprocess.run([gpipe_opt, onnx_path, "--mode=train", "--devices=cpu:0",
                "--micro-batches=8", "-o", one] + common, check=True,
               stdout=subprocess.DEVNULL)
losses = {}
for name, bundle in (("pipeline", pipe), ("one", one)):
    log = os.path.join(work, name + ".csv")
    subprocess.run([gpipe_run, bundle, "--train", "--data",
                    "/usr/share/datasets/fashion-mnist", "--steps=30",
                    "--loss-log", log], check=True, stdout=subprocess.DEVNULL)
    losses[name] = [float(l.split(",")[1]) for l in open(log).readlines()[1:]]
diff = max(abs(a - b) for a, b in zip(losses["pipeline"], losses["one"]))
check("the pipeline trains like one device (30 steps, 1e-5)",
      len(losses["pipeline"]) == 30 and diff < 1e-5, "max diff %g" % diff)
print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
