#!/usr/bin/env bash
# Installs everything gpipe's build, tests, demo and benchmarks need, from
# Debian 12 packages only. Idempotent: packages already present are skipped.
set -euo pipefail

packages=(
  # Toolchain
  build-essential cmake ninja-build ccache git clang-format
  # MLIR / LLVM 19 (compiler side only; the runtime never links them)
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools liblld-19-dev
  lld-19 zlib1g-dev libzstd-dev libedit-dev libxml2-dev libcurl4-openssl-dev
  # ONNX + protobuf
  libonnx-dev protobuf-compiler libprotobuf-dev python3-onnx
  # Kernels, parallelism
  libdnnl-dev libopenmpi-dev openmpi-bin
  # Header-only / small helpers
  libcli11-dev nlohmann-json3-dev libfmt-dev
  # Tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3-numpy
  # The Python package (import gpipe): pybind11 bindings of the runtime
  pybind11-dev python3-dev
  # MPI tests: network namespaces (ip), rank processes (pgrep), peak RSS
  # per rank in the MPI benchmark (/usr/bin/time)
  iproute2 procps time
  # Fuzz targets (scripts/fuzz.sh): clang with libFuzzer and its OpenMP
  clang-19 libclang-rt-19-dev libomp-19-dev
  # Benchmarks compare with PyTorch at its best: OpenBLAS, not reference BLAS
  libopenblas0-pthread
  python3-torch python3-torchvision
  # Reference data
  libonnx-testdata dataset-fashion-mnist
  # The HTML report rendered in a real browser (test/tools/report-browser)
  chromium
  # Plain-text corpus of the language-model example (scripts/language-model-demo.sh)
  fortunes
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
