"""What the benchmark scripts write their results with: the machine's CPU
name for the header, and the Markdown page, written and printed; how
their PyTorch workers time a step; and how fast the machine runs now."""
import os
import platform
import re
import statistics
import subprocess
import time


def print_median_step(step, steps, warmup):
    """Runs `step` `warmup` times, then `steps` times each timed on its own,
    and prints the median as `median_s=SECONDS` (what the scripts parse
    from their worker processes)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(f"median_s={statistics.median(times)}")


def cpu_name():
    """The CPU's model name (/proc/cpuinfo), else the architecture."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def write_doc(path, lines, echo=True):
    """Writes the page's lines to `path` atomically (a page a user had is
    never left half written) and prints them, or only its path."""
    text = "\n".join(lines)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    print(text if echo else f"wrote {path}")


def work_dir(prefix):
    """A fresh directory for a benchmark's models, bundles and logs
    (often gigabytes), removed when the script exits, however it exits
    short of being killed; GPIPE_BENCH_KEEP=1 keeps it (its path is
    printed) for a look at what a run left."""
    import atexit
    import shutil
    import sys
    import tempfile
    path = tempfile.mkdtemp(prefix=prefix)
    if os.environ.get("GPIPE_BENCH_KEEP") == "1":
        print(f"work directory kept: {path}", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def machine_speed(build):
    """One core's oneDNN sgemm rate now (GFLOP/s; 256x1024x1024, median of
    30): a probe of how fast this machine runs at the moment, beside the
    rate it had when it was calibrated. On a shared VM the same bundle's
    step moved by 40% between minutes while this rate moved with it."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        ["taskset", "-c", "0", os.path.join(build, "bin", "gpipe-bench"),
         "matmul", "256", "1024", "1024", "30"],
        capture_output=True, text=True, check=True, env=env).stdout
    seconds = float(re.search(r"median_s=([\d.e-]+)", out).group(1))
    return 2 * 256 * 1024 * 1024 / seconds / 1e9
