#!/usr/bin/env bash
# The runtime under ThreadSanitizer (build-tsan/) and under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/, shared with
# scripts/check-sanitizers.sh and scripts/fuzz.sh): each builds the
# runtime, gpipe-run, its GoogleTests and the Python module with the
# sanitizers (the compiler is the regular build's gpipe-opt: its
# bundles are data, their stage code is generated), then runs
#   - the runtime GoogleTests (threads, channels, workers, transports,
#     checkpoints, progress),
#   - the pipelined trainings of pipeline_equivalence.py on a covering set
#     (every K = 1..4, M = 1..8, GPipe and 1F1B, every recompute mode; MLP,
#     CNN, Transformer, ResNet-18; 6 configurations each),
#   - resume_after_kill.py (checkpoints, SIGKILL, --resume, dropout on a
#     two-stage 1F1B pipeline) and dropout_streams.py,
#   - mpi_pipeline.py's MLP cases on 2 and 4 MPI ranks (both schedules,
#     recompute never and always; the MPI transport's own threads) and its
#     failure cases (a killed rank, a damaged bundle),
#   - test/python/api.py: the Python bindings' training path (arrays and
#     DataLoaders, callbacks) with the sanitizer runtime preloaded.
# Every report is written to a log file (log_path) and any such file fails
# the run, also where a test expects its process to fail.
#
#   scripts/check-runtime-sanitizers.sh [thread] [address]   (default both)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
opt="${GPIPE_OPT:-$root/build/bin/gpipe-opt}"
[ -x "$opt" ] || { echo "check-runtime-sanitizers: build gpipe-opt first (scripts/build.sh)" >&2; exit 2; }
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(thread address)
failed=0
for kind in "${kinds[@]}"; do
  start=$(date +%s)
  # Both builds are clang's, with LLVM's OpenMP runtime: the runtime pins
  # each worker thread itself, and libomp would re-bind a thread to the
  # whole machine when its OpenMP runtime starts there.
  export KMP_AFFINITY=disabled
  case "$kind" in
  thread)
    # clang with LLVM's OpenMP runtime and its TSan tool Archer: libgomp's
    # barriers are invisible to TSan (every OpenMP region would look like
    # a race); libomp tells TSan about them through Archer. oneDNN's
    # GOMP_* calls bind to libomp's compatible entry points.
    build="$root/build-tsan"
    cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
      -DGPIPE_BUILD_COMPILER=OFF -DGPIPE_ENABLE_CUDA=OFF \
      -DGPIPE_SANITIZE=thread >/dev/null
    preload="$(clang++-19 -print-file-name=libclang_rt.tsan-x86_64.so)"
    export OMP_TOOL_LIBRARIES=/usr/lib/llvm-19/lib/libarcher.so
    export ARCHER_OPTIONS="verbose=0"
    ;;
  address)
    # The sanitizer build the compiler's check and the fuzzers use
    # (scripts/build-asan.sh: clang-19, CUDA off as under TSan).
    build="${GPIPE_ASAN_BUILD_DIR:-$root/build-asan}"
    "$root/scripts/build-asan.sh" >/dev/null
    preload="$(clang++-19 -print-file-name=libclang_rt.asan-x86_64.so)"
    # No TSan tool under ASan.
    unset OMP_TOOL_LIBRARIES ARCHER_OPTIONS
    ;;
  *) echo "usage: $0 [thread] [address]" >&2; exit 2 ;;
  esac
  ninja -C "$build" gpipe-run gpipe_runtime_tests gpipe_python_runtime >/dev/null
  work="$build/sanitizer-run"
  logs="$work/reports"
  rm -rf "$work" && mkdir -p "$logs"
  supp="$root/test/sanitizers"
  if [ "$kind" = thread ]; then
    # ignore_noninstrumented_modules: what libomp does inside itself is
    # its own business (Archer's advice); its synchronization of our code
    # reaches TSan through Archer.
    export TSAN_OPTIONS="log_path=$logs/tsan suppressions=$supp/tsan.supp ignore_noninstrumented_modules=1 second_deadlock_stack=1"
    unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
  else
    export ASAN_OPTIONS="log_path=$logs/asan detect_leaks=1 protect_shadow_gap=0 suppressions=$supp/asan.supp"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp print_suppressions=0"
    export UBSAN_OPTIONS="log_path=$logs/ubsan print_stacktrace=1 halt_on_error=1"
    unset TSAN_OPTIONS
  fi
  run="$build/bin/gpipe-run"
  e2e="$root/test/e2e"
  step() { # name, command...
    local name="$1"; shift
    local t0=$(date +%s)
    if "$@" >"$work/$name.log" 2>&1; then
      echo "$kind: PASS $name ($(( $(date +%s) - t0 )) s)"
    else
      echo "$kind: FAIL $name (see $work/$name.log)"; tail -5 "$work/$name.log"
      failed=$((failed + 1))
    fi
  }
  step gtest "$build/bin/gpipe_runtime_tests"
  # Six configurations per model (a training takes ~10 s under TSan
  # here): still every K, M, schedule and recompute mode.
  step pipeline_equivalence env GPIPE_COVERING=6 /usr/bin/python3 \
    "$e2e/pipeline_equivalence.py" "$opt" "$run" "$work/pipeline"
  step resume_after_kill /usr/bin/python3 "$e2e/resume_after_kill.py" \
    "$opt" "$run" "$work/resume"
  step dropout_streams /usr/bin/python3 "$e2e/dropout_streams.py" \
    "$opt" "$run" "$work/dropout"
  # Leaks are not checked in MPI ranks: Open MPI unloads its components
  # (dlclose) at MPI_Finalize, so what they keep cannot be attributed or
  # suppressed by name; memory errors are checked as everywhere.
  step mpi_pipeline env ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" \
    /usr/bin/python3 "$e2e/mpi_pipeline.py" "$opt" "$run" \
    "$work/mpi" "mlp 2,mlp 4,failures"
  # Python: the sanitizer runtime must come first in the process; the
  # tools the test starts get no preload (clang links TSan's runtime into
  # gpipe-run: a second copy would crash it).
  tools="$work/tools"
  mkdir -p "$tools"
  for t in "$run" "$opt"; do
    printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$t" >"$tools/$(basename "$t")"
    chmod +x "$tools/$(basename "$t")"
  done
  # With LLVM's OpenMP runtime (both builds here are clang's) the Python
  # path and gpipe-run differ in the last bits with several OpenMP threads
  # per stage (with libgomp, the shipped build, they are bit-identical:
  # ctest's api.py): one OpenMP thread per stage here, the stages' own
  # threads as ever.
  step python env OMP_NUM_THREADS=1 LD_PRELOAD="$preload" PYTHONPATH="$build/python" \
    GPIPE_OPT="$tools/gpipe-opt" PATH="$tools:$PATH" \
    ASAN_OPTIONS="${ASAN_OPTIONS:-} detect_leaks=0" \
    /usr/bin/python3 "$root/test/python/api.py" "$work/python"
  reports=$(ls "$logs" | wc -l)
  if [ "$reports" -ne 0 ]; then
    echo "$kind: FAIL $reports sanitizer report(s):"
    for f in $(ls "$logs" | head -5); do echo "== $f"; head -30 "$logs/$f"; done
    failed=$((failed + 1))
  else
    echo "$kind: no sanitizer report ($(( $(date +%s) - start )) s)"
  fi
done
[ "$failed" -eq 0 ]
