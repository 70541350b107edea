#!/usr/bin/env bash
# The main job for language models: installs the dependencies, builds
# gpipe, exports the byte-level GPT of examples/byte_gpt.py to ONNX with
# PyTorch, compiles it into a training pipeline of two stages on two CPU
# cores (cpu:0, cpu:1; 4 micro-batches), trains it on the plain text of
# Debian's `fortunes` package (bytes in, the next byte out), printing loss
# and tokens/s, then compiles the trained model for inference and prints
# what it writes after a few prompts.
#
# GPIPE_LM_STEPS sets the optimizer steps (default 1400: about 9 minutes
# on a 2-core machine).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_BUILD_DIR:-$root/build}"
out="${GPIPE_DEMO_DIR:-$root/build/lm-demo}"
steps="${GPIPE_LM_STEPS:-1400}"
fortunes=/usr/share/games/fortunes

"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
mkdir -p "$out"

# The corpus: every plain-text fortune file (not the .dat indexes, not the
# .u8 links), in name order.
find "$fortunes" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 |
  sort -z | xargs -0 cat > "$out/fortunes.txt"
echo "corpus: $out/fortunes.txt, $(wc -c < "$out/fortunes.txt") bytes"

/usr/bin/python3 "$root/examples/byte_gpt.py" --output "$out/byte_gpt.onnx"

echo
echo "== gpipe-opt byte_gpt.onnx --mode=train --devices=cpu:0,cpu:1 --micro-batches=4 -o byte_gpt.gpipe =="
"$build/bin/gpipe-opt" "$out/byte_gpt.onnx" --mode=train \
  --devices=cpu:0,cpu:1 --micro-batches=4 --batch-size=32 \
  --loss=cross-entropy --optimizer=adamw --lr=0.003 --weight-decay=0.01 \
  -o "$out/byte_gpt.gpipe"

echo
echo "== gpipe-run byte_gpt.gpipe --train --data=fortunes.txt --steps=$steps =="
"$build/bin/gpipe-run" "$out/byte_gpt.gpipe" --train \
  --data "$out/fortunes.txt" --steps "$steps" --lr-schedule=cosine \
  --warmup-steps=100 --loss-log "$out/loss.csv" \
  --save-onnx "$out/byte_gpt.trained.onnx"
echo "loss per step: $out/loss.csv"

echo
echo "== gpipe-opt byte_gpt.trained.onnx --batch-size=1 -o byte_gpt.gen.gpipe (inference) =="
"$build/bin/gpipe-opt" "$out/byte_gpt.trained.onnx" --batch-size=1 \
  -o "$out/byte_gpt.gen.gpipe"

for prompt in "The " "Q: " "Love is "; do
  echo
  echo "== gpipe-run byte_gpt.gen.gpipe --infer --generate=300 --prompt=\"$prompt\" --temperature=0.7 =="
  "$build/bin/gpipe-run" "$out/byte_gpt.gen.gpipe" --infer --generate=300 \
    --prompt="$prompt" --temperature=0.7
done
