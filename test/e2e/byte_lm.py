"""Byte-level language modelling as a user runs it: the GPT of
examples/byte_gpt.py (small), trained by `gpipe-run --train` on a plain
text file as a two-stage pipeline, learns a repeated sentence, and
`gpipe-run --infer --generate` continues a prompt with it; text data for a
model that is not a byte-level language model, and --generate on a bundle
that is not one, are refused with errors that say what is needed.

usage: byte_lm.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# 45 bytes: with a context of 23 (coprime), the training sequences start at
# every offset of the sentence, as generation's sliding window does.
SENTENCE = "the quick brown fox jumps over the lazy dog. "


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    failures = []

    def check(ok, what):
        print(("ok: " if ok else "FAIL: ") + what)
        if not ok:
            failures.append(what)

    text = os.path.join(work, "corpus.txt")
    with open(text, "w") as f:
        f.write(SENTENCE * 200)
    onnx_path = os.path.join(work, "byte_gpt.onnx")
    rc, out, err = run(["/usr/bin/python3",
                        os.path.join(ROOT, "examples", "byte_gpt.py"),
                        "--output", onnx_path, "--context", "23", "--dim",
                        "32", "--layers", "2", "--heads", "2"])
    if rc != 0:
        sys.exit(f"export failed: {err}")
    bundle = os.path.join(work, "byte_gpt.gpipe")
    rc, out, err = run([gpipe_opt, onnx_path, "--mode=train",
                        "--devices=cpu:0,cpu:1", "--micro-batches=2",
                        "--batch-size=16", "--optimizer=adamw", "--lr=0.01",
                        "-o", bundle])
    check(rc == 0, f"compile the training pipeline {err.strip()}")
    log = os.path.join(work, "loss.csv")
    trained = os.path.join(work, "trained.onnx")
    rc, out, err = run([gpipe_run, bundle, "--train", f"--data={text}",
                        "--steps=250", f"--loss-log={log}",
                        f"--save-onnx={trained}"])
    check(rc == 0, f"train on plain text {err.strip()}")
    check("tokens/s" in out, "the progress line counts tokens/s")
    with open(log) as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    check(losses[0] > 4.0 and losses[-1] < 0.3,
          f"the loss falls from ~ln(256) to < 0.3 ({losses[-1]:.3f})")

    gen = os.path.join(work, "gen.gpipe")
    rc, out, err = run([gpipe_opt, trained, "--batch-size=1", "-o", gen])
    check(rc == 0, f"compile the trained model for inference {err.strip()}")
    rc, out, err = run([gpipe_run, gen, "--infer", "--generate=60",
                        "--prompt=the quick"])
    print(f"generated: {out.strip()!r}")
    check(rc == 0 and out.startswith("the quick brown fox jumps over the lazy "
                                     "dog. the quick brown"),
          "greedy generation continues the sentence")
    rc, out2, err = run([gpipe_run, gen, "--infer", "--generate=60",
                         "--prompt=the quick", "--temperature=0.5",
                         "--generate-seed=3"])
    check(rc == 0 and len(out2.rstrip("\n")) == len("the quick") + 60,
          "sampled generation writes the prompt and 60 bytes")

    # Errors.
    rc, out, err = run([gpipe_run, gen, "--generate=5"])
    check(rc != 0 and "--generate needs --infer" in err,
          f"--generate without --infer: {err.strip()}")
    mlp = os.path.join(work, "mlp.onnx")
    rc, _, err = run(["/usr/bin/python3", "-c", f"""
import torch
m = torch.nn.Sequential(torch.nn.Linear(4, 3))
torch.onnx.export(m, torch.randn(2, 4), {mlp!r}, input_names=['input'],
                  output_names=['logits'], opset_version=17,
                  dynamic_axes={{'input': {{0: 'b'}}, 'logits': {{0: 'b'}}}})
"""])
    mlp_train = os.path.join(work, "mlp.gpipe")
    run([gpipe_opt, mlp, "--mode=train", "--batch-size=4", "-o", mlp_train])
    rc, out, err = run([gpipe_run, mlp_train, "--train", f"--data={text}",
                        "--steps=1"])
    check(rc != 0 and text in err and "plain text" in err
          and "int64 token ids" in err,
          f"text data for a classifier: {err.strip()}")
    mlp_infer = os.path.join(work, "mlp_infer.gpipe")
    run([gpipe_opt, mlp, "--batch-size=1", "-o", mlp_infer])
    rc, out, err = run([gpipe_run, mlp_infer, "--infer", "--generate=5"])
    check(rc != 0 and "--generate needs token ids int64" in err,
          f"--generate on a classifier: {err.strip()}")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
