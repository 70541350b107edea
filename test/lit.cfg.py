# lit configuration of gpipe's tests: test/<suite> in the source tree runs in
# build/test/<suite>.
import os
import lit.formats

config.name = "gpipe"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".textproto", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "CMakeLists.txt",
                   "Inputs", "runtime"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.gpipe_obj_root, "test")

config.environment["PATH"] = os.pathsep.join(
    [config.gpipe_tools_dir, config.llvm_tools_dir,
     config.environment.get("PATH", "")])
# The Python package as this build assembles it (python/CMakeLists.txt).
config.environment["PYTHONPATH"] = os.path.join(config.gpipe_obj_root,
                                                "python")
# Sanitizer builds: make any report fatal and visible.
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(
    ("%onnx-encode",
     "protoc --encode=onnx.ModelProto -I/usr/include onnx/onnx.proto"))
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%gpipe_src", config.gpipe_src_root))
config.substitutions.append(("%gpipe_lib",
                             os.path.join(config.gpipe_obj_root, "lib")))
# ptxas (CUDA toolkit) checks the PTX of CUDA stages.
import shutil
if shutil.which("ptxas") or os.path.exists("/usr/local/cuda/bin/ptxas"):
    config.available_features.add("ptxas")
    config.environment["PATH"] += os.pathsep + "/usr/local/cuda/bin"
config.substitutions.append(("%testdata", "/usr/share/libonnx-testdata/data"))
# --param node_tests=sample (scripts/check-sanitizers.sh): the ONNX backend
# node tests one per distinct set of op types (backend_node_tests.py).
config.substitutions.append(
    ("%node_tests_sample",
     "--sample" if lit_config.params.get("node_tests") == "sample" else ""))
# bf16: this CPU runs bfloat16 products (oneDNN's need AVX-512; gpipe-run
# refuses a --precision=bf16 bundle elsewhere, with an error that says so).
# Tests that train in bfloat16 say REQUIRES: bf16 and are unsupported on
# other CPUs (lit lists them); the refusal itself is checked in
# tools/gpipe-run/bf16-refused.test.
import subprocess
try:
    devices = subprocess.run(
        [os.path.join(config.gpipe_tools_dir, "gpipe-run"), "--list-devices"],
        capture_output=True, text=True, timeout=60).stdout
except (OSError, subprocess.TimeoutExpired):
    devices = ""
if "CPU bfloat16 products (--precision=bf16): yes" in devices:
    config.available_features.add("bf16")
