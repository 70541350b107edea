"""Checks a calibrated profile's kernel fits against the kernels' speed.

Each family's work is priced at no more than the fastest rate one of its
calibration kernels reached (fastest_forward, fastest_backward; for a
matmul or a convolution about the cores' sgemm peak: CalibrateKernels.cpp,
fit). A free fit had put a matmul's work at twice the peak (550 GFLOP/s on
a core of 270) and the large products' time on their bytes. The bound is
the fit's own, not a machine's: 1e-9 relative for the JSON's rounding.

usage: check_work_rates.py profile.json
"""
import json
import sys

profile = json.load(open(sys.argv[1]))
failed = False
for fit in profile["kernels"]:
    if "fastest_forward" not in fit:
        continue  # a generated loop's fit: bytes alone
    for phase in ("forward", "backward"):
        if phase not in fit:
            continue
        work, fastest = fit[phase][1], fit["fastest_" + phase]
        rate = 1 / work if work > 0 else float("inf")
        ok = rate <= fastest * (1 + 1e-9)
        failed |= not ok
        print(f"{fit['family']} {fit['cores']} core(s) {phase}: work at "
              f"{rate:.4g}/s, fastest kernel {fastest:.4g}/s: "
              f"{'ok' if ok else 'FASTER THAN ANY KERNEL RAN'}")
sys.exit(1 if failed else 0)
