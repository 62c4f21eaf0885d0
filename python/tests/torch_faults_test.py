#!/usr/bin/env python3
"""Failures on backend braid raise RuntimeError on every rank with the cause named, never hang:

  --case raise     rank V (the middle rank) raises a Python exception in its training loop while
                   the others are in an all_reduce; it exits, and every other rank's all_reduce
                   raises within BRAID_TIMEOUT + 1 s, naming rank V.
  --case stall     rank V raises and then lingers in its exception handler (alive, never calling
                   again, as a rank stuck in error handling): the others raise within
                   BRAID_TIMEOUT + 1 s naming rank V; V exits after they have.
  --case mismatch  rank 0 calls all_reduce on 16 elements, the others on 17 (then: float32 vs
                   float64): every rank raises, naming both calls.

Run by torch_launch.py with BRAID_TIMEOUT set (the launcher's --expect-exit accepts V's exit
status 3 in the first two cases). Each error prints "RAISED rank R after S s: message"; a rank
whose checks all passed prints "SURVIVOR rank R" last.
"""
import argparse
import os
import sys
import time

from torch_env import dist, init, torch

ap = argparse.ArgumentParser()
ap.add_argument("--case", choices=["raise", "stall", "mismatch"], required=True)
ap.add_argument("--count", type=int, default=1 << 20,
                help="elements of the all_reduce the others are in (small: braid's blocking "
                     "board path, BRAID_TORCH_BLOCKING_BYTES)")
args = ap.parse_args()
limit = float(os.environ.get("BRAID_TIMEOUT", "300")) + 1.0
rank, size = init("braid", timeout_s=600)  # torch's timeout is not what must fire here
victim = size // 2


def timed_failure(fn, words):
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        secs = time.monotonic() - start
        msg = str(e)
        missing = [w for w in words if w not in msg]
        if missing:
            print("FAIL: rank %d: the error lacks %s: %s" % (rank, missing, msg), flush=True)
            sys.exit(1)
        if secs > limit:
            print("FAIL: rank %d raised after %.2f s, over BRAID_TIMEOUT + 1 = %.1f s" %
                  (rank, secs, limit), flush=True)
            sys.exit(1)
        print("RAISED rank %d after %.2f s: %s" % (rank, secs, msg.split("\n")[0]), flush=True)
        return
    print("FAIL: rank %d: no error" % rank, flush=True)
    sys.exit(1)


big = torch.ones(args.count)
if args.case in ("raise", "stall"):
    for step in range(5):
        if rank == victim and step == 3:
            try:
                raise RuntimeError("injected failure on rank %d at step %d" % (rank, step))
            except RuntimeError:
                if args.case == "stall":
                    time.sleep(limit + 8)  # alive, never calling: the others time out first
                    os._exit(3)
                raise SystemExit(3)
        if rank != victim and step == 3:
            # A rank that died is named by everyone. One that lingers alive is named by the
            # ranks that wait on it directly; braid's engine may name a rank that waits on it in
            # turn to ranks further away (the stall probe sees that rank alive and stalled too):
            # the stall case checks the time and that a stalled rank is named.
            words = ["rank %d" % victim] if args.case == "raise" else ["made no progress"]
            timed_failure(lambda: dist.all_reduce(big), words)
            print("SURVIVOR rank %d" % rank, flush=True)
            os._exit(0)  # the group is broken: leave without a goodbye collective
        dist.all_reduce(big)
else:
    timed_failure(lambda: dist.all_reduce(torch.ones(16 if rank == 0 else 17)),
                  ["count=16", "count=17"])
    timed_failure(lambda: dist.all_reduce(
        torch.ones(8, dtype=torch.float32 if rank == 0 else torch.float64)), ["float", "double"])
    print("SURVIVOR rank %d: both mismatches raised" % rank, flush=True)
    os._exit(0)
