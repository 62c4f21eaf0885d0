#!/usr/bin/env python3
"""Runs examples/pytorch_sharded.py with a braid preset and with --reference ddp under braidrun and
checks that rank 0's losses agree step by step within a relative tolerance (the ctest
pytorch_sharded.*). Exits 77 (ctest's skip) only when no Python interpreter with torch is found.

    pytorch_sharded_check.py --braidrun build/tools/braidrun -n 2 --steps 5 --preset zero3
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def python_with_torch():
    """This interpreter, else Debian's (python3-torch installs there; a pyenv or venv python3
    earlier on PATH does not see it)."""
    for exe in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import torch"],
                                                  capture_output=True).returncode == 0:
            return exe
    return None


def losses(cmd, timeout):
    print("+ " + " ".join(cmd), flush=True)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit("FAIL: no result within %d s" % timeout)
    print(out.stdout + out.stderr, end="", flush=True)
    if out.returncode != 0:
        sys.exit("FAIL: exit status %d" % out.returncode)
    return [float(x) for x in re.findall(r"^step +\d+ +loss ([-0-9.e+naif]+)$", out.stdout, re.M)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--braidrun", required=True)
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--preset", default="zero3")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per run")
    args = ap.parse_args()
    exe = python_with_torch()
    if exe is None:
        print("SKIP: torch is not installed (tools/install-deps.sh installs python3-torch)")
        return 77
    # braidrun kills every rank after --timeout, so a hung rank cannot outlive the test.
    run = [args.braidrun, "-n", str(args.n), "--timeout", str(args.timeout), "--", exe,
           os.path.join(HERE, "pytorch_sharded.py"), "--steps", str(args.steps)]
    got = losses(run + ["--preset", args.preset], args.timeout + 10)
    ref = losses(run + ["--reference", "ddp"], args.timeout + 10)
    if len(got) != args.steps or len(ref) != args.steps:
        sys.exit("FAIL: expected %d losses, got %d (braid) and %d (ddp)" %
                 (args.steps, len(got), len(ref)))
    worst = 0.0
    for step, (a, b) in enumerate(zip(got, ref)):
        rel = abs(a - b) / max(abs(b), 1e-30)
        worst = max(worst, rel)
        print("step %3d  braid %.8f  ddp %.8f  rel %.2e" % (step, a, b, rel))
    verdict = "PASS" if worst <= args.rtol else "FAIL"
    print("%s: braid %s vs torch DDP on %d ranks, %d steps: max relative loss difference %.2e "
          "(tolerance %.0e)" % (verdict, args.preset, args.n, args.steps, worst, args.rtol))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
