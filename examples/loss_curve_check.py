#!/usr/bin/env python3
"""Runs examples/c_trainer under `braidrun --emulate GxM` with a preset and with a reference
preset and checks that rank 0's losses agree step by step within a relative tolerance (the ctest
c_trainer.*_vs_*): the loss curve of a quantized preset (zero++, zero-topo) against zero3's.
Exits 77 (ctest's skip) when the emulated cluster cannot be made (not root).

    loss_curve_check.py --braidrun build/tools/braidrun --trainer build/examples/c_trainer \
        --emulate 2x2 --preset zero++ --reference zero3 --steps 30 --tolerance 0.10
"""
import argparse
import os
import re
import subprocess
import sys


def losses(cmd, timeout):
    print("+ " + " ".join(cmd), flush=True)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit("FAIL: no result within %d s" % timeout)
    print(out.stdout + out.stderr, end="", flush=True)
    if out.returncode != 0:
        sys.exit("FAIL: exit status %d" % out.returncode)
    if "every rank agreed every step" not in out.stdout:
        sys.exit("FAIL: the trainer did not report agreement of every rank")
    return [float(x) for x in re.findall(r"^step +\d+ +loss ([-0-9.e+naif]+)", out.stdout, re.M)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--braidrun", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--emulate", default="2x2")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--reference", default="zero3")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: the emulated cluster needs root (network namespaces)")
        return 77
    runs = {}
    for preset in (a.reference, a.preset):
        cmd = [a.braidrun, "--emulate", a.emulate, "--timeout", str(a.timeout), "--",
               a.trainer, "--preset", preset, "--steps", str(a.steps)]
        runs[preset] = losses(cmd, a.timeout + 30)
    ref, got = runs[a.reference], runs[a.preset]
    if len(ref) != a.steps or len(got) != a.steps:
        sys.exit("FAIL: %d and %d losses, expected %d each" % (len(ref), len(got), a.steps))
    worst = 0.0
    for step, (r, g) in enumerate(zip(ref, got)):
        rel = abs(g - r) / abs(r)
        worst = max(worst, rel)
        print("step %3d  %s %.6f  %s %.6f  relative %.4f" % (step, a.reference, r, a.preset, g,
                                                             rel))
        if not rel <= a.tolerance:
            sys.exit("FAIL: step %d: %s loss %.6f, %s %.6f (relative %.4f > %.2f)" %
                     (step, a.preset, g, a.reference, r, rel, a.tolerance))
    print("PASS: %s vs %s on %s, %d steps: largest relative loss difference %.4f (tolerance %.2f)"
          % (a.preset, a.reference, a.emulate, a.steps, worst, a.tolerance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
