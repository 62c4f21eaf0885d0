#!/usr/bin/env python3
"""Runs examples/torch_ddp.py with backend braid and with backend gloo on the same ranks
(python/tests/torch_launch.py: torchrun's variables, or braidrun) and checks that rank 0's
losses agree step by step within --rtol (0: bit for bit). Exits 77 (ctest's skip) when no
python3 imports torch.

    torch_ddp_check.py -n 2 --steps 50 [--mode env|braidrun --braidrun PATH] [--rtol 1e-6]
    torch_ddp_check.py -n 4 --steps 20 --braid-env BRAID_DETERMINISTIC=1 --against-braid \\
        --against-env BRAID_TRANSPORTS=tcp --rtol 0

--against-braid compares two braid runs instead (with --against-env applied to the second).
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "python", "tests", "torch_launch.py")


def losses(args, backend, env_pairs):
    cmd = [sys.executable, LAUNCH, "--mode", args.mode, "-n", str(args.n), "--timeout",
           str(args.timeout), "--name", "torch_ddp " + backend]
    if args.braidrun:
        cmd += ["--braidrun", args.braidrun]
    cmd += ["--", os.path.join(HERE, "torch_ddp.py"), "--backend", backend, "--steps",
            str(args.steps)] + args.ddp_args.split()
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in env_pairs)
    print("+ %s%s" % ("".join("%s " % kv for kv in env_pairs), " ".join(cmd)), flush=True)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    print(out.stdout + out.stderr, end="", flush=True)
    if out.returncode == 77:
        sys.exit(77)
    if out.returncode != 0:
        sys.exit("FAIL: the %s run failed (exit status %d)" % (backend, out.returncode))
    # Rank 0's lines: "[rank 0] step" under the env launcher, "[default0]:step" under torchrun,
    # bare under braidrun.
    return [float(x) for x in re.findall(
        r"^(?:\[rank 0\] |\[default0\]:)?step +\d+ +loss ([-0-9.e+naif]+)$", out.stdout, re.M)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--mode", default="env", choices=["env", "braidrun", "torchrun"])
    ap.add_argument("--braidrun")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--braid-env", action="append", default=[], metavar="K=V")
    ap.add_argument("--against-braid", action="store_true")
    ap.add_argument("--against-env", action="append", default=[], metavar="K=V")
    ap.add_argument("--ddp-args", default="", help="more arguments of torch_ddp.py, e.g. "
                    "'--d-model 128 --bucket-mb 0.3'")
    args = ap.parse_args()
    got = losses(args, "braid", args.braid_env)
    ref_name = "braid" if args.against_braid else "gloo"
    ref = losses(args, ref_name, args.braid_env + args.against_env if args.against_braid
                 else args.against_env)
    if len(got) != args.steps or len(ref) != args.steps:
        sys.exit("FAIL: expected %d losses, got %d (braid) and %d (%s)" %
                 (args.steps, len(got), len(ref), ref_name))
    worst = 0.0
    for step, (a, b) in enumerate(zip(got, ref)):
        rel = abs(a - b) / max(abs(b), 1e-30)
        worst = max(worst, rel)
        print("step %3d  braid %.12f  %s %.12f  rel %.2e" % (step, a, ref_name, b, rel))
    identical = got == ref
    verdict = "PASS" if worst <= args.rtol else "FAIL"
    print("%s: DDP on braid vs %s%s on %d ranks, %d steps: max relative loss difference %.2e "
          "(tolerance %.0e)%s" % (verdict, ref_name, " " + " ".join(args.against_env)
                                  if args.against_env else "", args.n, args.steps, worst,
                                  args.rtol, ", bit-identical" if identical else ""))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
