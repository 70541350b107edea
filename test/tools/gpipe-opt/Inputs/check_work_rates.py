"""Checks a calibrated profile's kernel fits against the kernels' speed.

Each family's work is priced at no more than the fastest rate its
calibration kernels reached (fastest_forward, fastest_backward: the median
of its three fastest kernels' rates; for a matmul or a convolution about
the cores' sgemm peak: CalibrateKernels.cpp, fit). A free fit had put a
matmul's work at twice the peak (550 GFLOP/s on a core of 270) and the
large products' time on their bytes. The bound is
the fit's own, not a machine's: 1e-9 relative for the JSON's rounding.

A term for the bytes beyond the caches (a kernel's coefficients 4 and 5,
a generated loop's 2) is priced only when at least three of the
calibration's kernels held a tenth of their bytes beyond the caches
(beyond_caches_points): fitted from 128 bytes past the line, two cores'
batch norms priced the bytes beyond at 0.02 GB/s.

usage: check_work_rates.py profile.json
"""
import json
import sys

profile = json.load(open(sys.argv[1]))
failed = False
for fit in profile["kernels"]:
    for phase in ("forward", "backward") if "fastest_forward" in fit else ():
        if phase not in fit:
            continue
        work, fastest = fit[phase][1], fit["fastest_" + phase]
        rate = 1 / work if work > 0 else float("inf")
        ok = rate <= fastest * (1 + 1e-9)
        failed |= not ok
        print(f"{fit['family']} {fit['cores']} core(s) {phase}: work at "
              f"{rate:.4g}/s, fastest kernel {fastest:.4g}/s: "
              f"{'ok' if ok else 'FASTER THAN ANY KERNEL RAN'}")
    points = fit.get("beyond_caches_points", [0, 0])
    terms = ([4, 5] if "fastest_forward" in fit else [2])
    for part, term in enumerate(terms):
        priced = len(fit["forward"]) > term and fit["forward"][term] > 0
        ok = not priced or points[part] >= 3
        failed |= not ok
        print(f"{fit['family']} {fit['cores']} core(s) forward: bytes beyond "
              f"the caches {'priced' if priced else 'not priced'}, "
              f"{points[part]} kernel(s) there: "
              f"{'ok' if ok else 'PRICED FROM TOO FEW'}")
sys.exit(1 if failed else 0)
