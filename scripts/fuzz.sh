#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz in the sanitizer build,
# build-asan/ (scripts/build-asan.sh: clang-19, the libraries with
# -fsanitize=fuzzer-no-link,address,undefined, the targets with
# -fsanitize=fuzzer), and runs each for SECONDS, one after
# the other, on a copy of its seed corpus (test/fuzz/corpus/<name>).
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# SECONDS defaults to 60; TARGETs are names without "fuzz-" (npy, npz,
# tensor-proto, idx, checkpoint, bundle, onnx-import; default: all).
# The working corpora (seeds plus what libFuzzer found) stay in
# build-asan/fuzz/<name>/corpus for the next run, findings go to
# build-asan/fuzz/<name>/artifacts; exits 1 if any target found something.
# Needs clang-19, libclang-rt-19-dev and libomp-19-dev (the runtime uses
# OpenMP). GPIPE_ASAN_BUILD_DIR overrides the build directory; extra
# libFuzzer flags can come in GPIPE_FUZZ_FLAGS (e.g. -max_len=8192).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${GPIPE_ASAN_BUILD_DIR:-$root/build-asan}"
seconds="${1:-60}"
shift || true
all=(npy npz tensor-proto idx checkpoint bundle onnx-import)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${all[@]}")

targets=()
for name in "${names[@]}"; do targets+=("fuzz-$name"); done
"$root/scripts/build-asan.sh" "${targets[@]}"

# The file-based targets write every input to a file: on tmpfs that costs
# little (20 times the executions of a disk-backed /tmp).
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
failed=()
for name in "${names[@]}"; do
  seeds="$root/test/fuzz/corpus/$name"
  work="$build/fuzz/$name"
  mkdir -p "$work/corpus" "$work/artifacts"
  # A copy: libFuzzer adds what it finds to its first corpus directory.
  cp -n "$seeds"/* "$work/corpus/" 2>/dev/null || true
  echo "== fuzz-$name: ${seconds}s on $(find "$work/corpus" -type f | wc -l) inputs"
  status=0
  # shellcheck disable=SC2086
  "$build/bin/fuzz-$name" "$work/corpus" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" ${GPIPE_FUZZ_FLAGS:-} \
    >"$work/log.txt" 2>&1 || status=$?
  # (a crash prints the final statistics twice)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log.txt" | tail -n 1)
  cov=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$work/log.txt" |
    tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' || true)
  echo "fuzz-$name: ${runs:-?} runs, ${speed:-?} exec/s, $cov"
  if [ "$status" -ne 0 ]; then
    failed+=("$name")
    echo "fuzz-$name: FINDING (exit $status); log: $work/log.txt"
    grep -E 'ERROR:|runtime error:|Test unit written to' "$work/log.txt" | head -n 20 || true
    echo "reproduce: $build/bin/fuzz-$name <the file written above>"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: no findings (${#names[@]} targets, ${seconds}s each)"
