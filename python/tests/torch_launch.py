#!/usr/bin/env python3
"""Starts a torch rank script on N local ranks and fails, never hangs, when they do not finish.

    torch_launch.py --mode env -n 4 [--timeout 120] -- script.py args...
    torch_launch.py --mode braidrun --braidrun build/tools/braidrun -n 4 -- script.py args...
    torch_launch.py --mode torchrun -n 2 -- script.py args...

env: this script starts the N processes itself with torchrun's variables (MASTER_ADDR,
MASTER_PORT on a free port, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE); braidrun: the ranks
get braidrun's (BRAID_RANK, BRAID_WORLD_SIZE) and meet in a file:// store this script names and
removes; torchrun: python3 -m torch.distributed.run --standalone (with --redirects 1 --tee 1:
torch 1.13's torchrun fails on Python 3.11 with its default redirects). Every rank runs under
Debian's python3 when the python3 running this cannot import torch (exit 77, ctest's skip, when
none can). After --timeout seconds every rank still running is killed (its process group) and
the launch fails. --expect-exit R=C accepts exit status C from rank R (env mode: a rank that is
meant to fail); every other rank must exit 0. --expect REGEX must match the combined output.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def python_with_torch():
    for exe in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import torch.distributed"],
                                                  capture_output=True).returncode == 0:
            return exe
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_env(args, exe, cmd):
    port = free_port()
    procs, outs = [], []
    for r in range(args.n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(args.n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(args.n))
        out = tempfile.TemporaryFile(mode="w+")
        procs.append(subprocess.Popen([exe] + cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True))
        outs.append(out)
    deadline = time.monotonic() + args.timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    hung = [r for r, p in enumerate(procs) if p.poll() is None]
    for p in procs:
        kill_group(p)  # the rank and anything it started
        p.wait()
    text, codes = "", {}
    for r, (p, out) in enumerate(zip(procs, outs)):
        out.seek(0)
        text += "".join("[rank %d] %s" % (r, line) for line in out.read().splitlines(True))
        codes[r] = p.returncode
    return text, codes, hung


def run_single(args, cmd, env):
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        text, _ = p.communicate(timeout=args.timeout)
        hung = []
    except subprocess.TimeoutExpired:
        kill_group(p)
        text, _ = p.communicate()
        hung = ["all"]
    return text, {"job": p.returncode}, hung


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["env", "braidrun", "torchrun"], required=True)
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("--braidrun", help="braidrun binary (--mode braidrun)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds before every rank is killed")
    ap.add_argument("--expect-exit", action="append", default=[], metavar="RANK=CODE")
    ap.add_argument("--expect", action="append", default=[], metavar="REGEX")
    ap.add_argument("--name", default="", help="printed in the PASS line")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    exe = python_with_torch()
    if exe is None:
        print("SKIP: torch is not installed (tools/install-deps.sh installs python3-torch)")
        return 77
    start = time.monotonic()
    if args.mode == "env":
        text, codes, hung = run_env(args, exe, cmd)
    elif args.mode == "braidrun":
        store = os.path.join(tempfile.gettempdir(), "braid-torch-store-%d" % os.getpid())
        env = dict(os.environ, BRAID_TORCH_TEST_STORE=store)
        try:
            text, codes, hung = run_single(
                args, [args.braidrun, "-n", str(args.n), "--timeout", str(args.timeout), "--", exe]
                + cmd, env)
        finally:
            if os.path.exists(store):
                os.unlink(store)
    else:
        # torch 1.13's torchrun on Python 3.11 parses its default "--redirects 0" into None (its
        # Std flag enum's 0 member is not iterated there) and fails; stdout redirected to a log
        # folder and teed to the console parses.
        logs = tempfile.mkdtemp(prefix="braid-torchrun-")
        try:
            text, codes, hung = run_single(
                args, [exe, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                       str(args.n), "--redirects", "1", "--tee", "1", "--log_dir", logs] + cmd,
                dict(os.environ))
        finally:
            shutil.rmtree(logs, ignore_errors=True)
    print(text, end="", flush=True)
    secs = time.monotonic() - start
    if hung:
        print("FAIL: ranks %s still running after %d s: killed" % (hung, args.timeout))
        return 1
    expected = {int(k): int(v) for k, v in (e.split("=") for e in args.expect_exit)}
    bad = {r: c for r, c in codes.items() if c != expected.get(r, 0)}
    if bad:
        print("FAIL: exit status %s (expected 0%s)" %
              (bad, "".join(", rank %d: %d" % kv for kv in expected.items())))
        return 1
    for pattern in args.expect:
        if not re.search(pattern, text, re.M):
            print("FAIL: the output does not match %r" % pattern)
            return 1
    print("PASS: %s %s on %d ranks in %.1f s" % (args.name or os.path.basename(cmd[0]),
                                                  args.mode, args.n, secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
