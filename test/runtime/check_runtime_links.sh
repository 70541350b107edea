#!/usr/bin/env bash
# Fails if the runtime library or gpipe-run link MLIR or LLVM, by their link
# commands in the build (ninja) or their dynamic dependencies (ldd).
# usage: check_runtime_links.sh BUILD_DIR RUNTIME_LIB GPIPE_RUN
set -euo pipefail
build=$1
shift
status=0
for target in gpipe_runtime gpipe-run; do
  if command -v ninja >/dev/null && [ -f "$build/build.ninja" ]; then
    line=$(ninja -C "$build" -t commands "$target" | tail -n 1)
    if grep -Eiq 'mlir|llvm' <<<"$line"; then
      echo "FAIL: the link command of $target mentions MLIR/LLVM: $line"
      status=1
    fi
  fi
done
for file in "$@"; do
  if ldd "$file" | grep -Eiq 'mlir|llvm'; then
    echo "FAIL: $file depends on MLIR/LLVM:"
    ldd "$file" | grep -Ei 'mlir|llvm'
    status=1
  else
    echo "ok: $(basename "$file") links no MLIR/LLVM library"
  fi
done
exit $status
