#!/usr/bin/env bash
# Trains the pipeline equivalence and PyTorch training suites with two
# builds of gpipe and checks that every loss log and every saved parameter
# is bit-identical between them (docs/testing.md). For changes that must not
# change a number, e.g. a refactoring of the runtime.
#   scripts/compare-training-runs.sh BEFORE_BUILD AFTER_BUILD [WORK_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
before="$1" after="$2" work="${3:-$(mktemp -d)}"
for side in before after; do
  bin="${!side}/bin"
  for suite in pipeline_equivalence pytorch_training; do
    mkdir -p "$work/$side"
    GPIPE_KEEP_OUTPUTS=1 /usr/bin/python3 "$root/test/e2e/$suite.py" \
      "$bin/gpipe-opt" \
      "$bin/gpipe-run" "$work/$side/$suite" 2>"$work/$side/$suite.stderr" |
      tail -n 1 | sed "s/^/$side $suite: /"
  done
done
/usr/bin/python3 - "$work" <<'PY'
import filecmp, os, sys
work = sys.argv[1]
compared = differ = 0
for dirpath, _, files in os.walk(os.path.join(work, "before")):
    for f in files:
        if not (f.endswith(".csv") or f.endswith(".npy")):
            continue
        a = os.path.join(dirpath, f)
        b = os.path.join(work, "after", os.path.relpath(a, os.path.join(work, "before")))
        compared += 1
        if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
            differ += 1
            print("differs:", os.path.relpath(a, work))
print(f"{compared} loss logs and parameter files compared, {differ} differ")
sys.exit(1 if differ or not compared else 0)
PY
