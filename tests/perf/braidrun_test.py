#!/usr/bin/env python3
"""Tests of the braidrun launcher with shell ranks (no collectives needed).

    braidrun_test.py BRAIDRUN CASE

CASE is one of: env, prefix, exit-code, signal, kill-others, timeout, forward-sigterm,
bad-usage, exec-failure. Each prints OK or FAIL with the reason.
"""
import os
import signal
import subprocess
import sys
import time


def run(args, timeout=60, **kw):
    t0 = time.monotonic()
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    return p, time.monotonic() - t0


def check(cond, msg, p=None):
    if not cond:
        print("FAIL: " + msg)
        if p is not None:
            print("exit %d\n--- stdout\n%s\n--- stderr\n%s" % (p.returncode, p.stdout[-3000:],
                                                            p.stderr[-3000:]))
        sys.exit(1)


def main():
    braidrun, case = sys.argv[1], sys.argv[2]
    if case == "env":
        p, _ = run([braidrun, "-n", "4", "--", "sh", "-c",
                    'echo "R=$BRAID_RANK W=$BRAID_WORLD_SIZE L=$BRAID_LOCAL_RANK '
                    'LS=$BRAID_LOCAL_SIZE ID=${#BRAID_UNIQUE_ID} $BRAID_UNIQUE_ID"'])
        check(p.returncode == 0, "env: exit status", p)
        lines = sorted(p.stdout.split("\n")[:-1])
        check(len(lines) == 4, "env: 4 lines", p)
        ids = set()
        for r, line in enumerate(lines):
            f = line.split()
            check(f[:5] == ["R=%d" % r, "W=4", "L=%d" % r, "LS=4", "ID=256"], "env: " + line, p)
            check(all(c in "0123456789abcdef" for c in f[5].lower()), "env: hex id", p)
            ids.add(f[5])
        check(len(ids) == 1, "env: every rank gets the same id", p)
    elif case == "prefix":
        # Lines stay whole and carry their rank; a last line without newline is still printed.
        script = ('for i in 1 2 3 4 5; do echo "line $i of rank $BRAID_RANK"; done; '
                  'echo "err of rank $BRAID_RANK" >&2; printf "tail $BRAID_RANK"')
        p, _ = run([braidrun, "-n", "3", "--prefix-output", "sh", "-c", script])
        check(p.returncode == 0, "prefix: exit status", p)
        out = p.stdout.split("\n")[:-1]
        check(len(out) == 18, "prefix: 18 stdout lines", p)
        for line in out:
            r = line[1]
            check(line.startswith("[%s] " % r) and (line.endswith("rank " + r) or
                                                    line == "[%s] tail %s" % (r, r)),
                  "prefix: bad line %r" % line, p)
        err = [l for l in p.stderr.split("\n") if l]
        check(sorted(err) == ["[%d] err of rank %d" % (r, r) for r in range(3)],
              "prefix: stderr lines", p)
    elif case == "exit-code":
        p, _ = run([braidrun, "-n", "3", "sh", "-c", '[ "$BRAID_RANK" = 2 ] && exit 3; exit 0'])
        check(p.returncode == 3, "exit-code: want 3", p)
    elif case == "signal":
        p, _ = run([braidrun, "-n", "2", "sh", "-c",
                    '[ "$BRAID_RANK" = 1 ] && kill -KILL $$; sleep 30'])
        check(p.returncode == 128 + 9, "signal: want 137 (128+SIGKILL)", p)
    elif case == "kill-others":
        # Rank 1 fails at once; rank 0 would sleep 60 s (ignoring SIGTERM would cost 2 s more).
        p, dt = run([braidrun, "-n", "3", "sh", "-c",
                     'if [ "$BRAID_RANK" = 1 ]; then exit 3; fi; sleep 60'])
        check(p.returncode == 3, "kill-others: want 3", p)
        check(dt < 10, "kill-others: took %.1f s, the others were not stopped" % dt, p)
        p, dt = run([braidrun, "-n", "2", "sh", "-c",
                     'trap "" TERM; if [ "$BRAID_RANK" = 1 ]; then exit 4; fi; '
                     'while :; do sleep 0.1; done'])
        check(p.returncode == 4, "kill-others (TERM ignored): want 4", p)
        check(dt < 10, "kill-others: SIGKILL did not follow SIGTERM (%.1f s)" % dt, p)
    elif case == "timeout":
        p, dt = run([braidrun, "-n", "2", "--timeout", "1", "sleep", "30"])
        check(p.returncode == 124, "timeout: want 124", p)
        check(dt < 10, "timeout: took %.1f s" % dt, p)
        check("timeout" in p.stderr, "timeout: message", p)
    elif case == "forward-sigterm":
        proc = subprocess.Popen([braidrun, "-n", "2", "sh", "-c",
                                 'trap "exit 42" TERM; echo ready; while :; do sleep 0.1; done'],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = 0
        while ready < 2:
            line = proc.stdout.readline()
            check(line != "", "forward-sigterm: ranks did not start")
            ready += line.strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            check(False, "forward-sigterm: braidrun did not end")
        check(rc == 42, "forward-sigterm: want 42 (the ranks' trap), got %d" % rc)
    elif case == "bad-usage":
        for args, text in (([], "missing -n"), (["-n", "0", "true"], "-n"),
                           (["-n", "x", "true"], "-n"), (["-n", "2"], "missing the command"),
                           (["-n", "2", "--bogus", "true"], "unknown option"),
                           (["-n", "2", "--timeout", "-1", "true"], "--timeout")):
            p, _ = run([braidrun] + args)
            check(p.returncode == 2, "bad-usage %r: want exit 2" % args, p)
            check(text in p.stderr and "usage:" in p.stderr, "bad-usage %r: message" % args, p)
        p, _ = run([braidrun, "--help"])
        check(p.returncode == 0 and "usage:" in p.stdout, "--help", p)
    elif case == "exec-failure":
        p, _ = run([braidrun, "-n", "2", "/nonexistent/program"])
        check(p.returncode == 127, "exec-failure: want 127", p)
        check("cannot execute" in p.stderr, "exec-failure: message", p)
    else:
        check(False, "unknown case " + case)
    print("OK: " + case)


if __name__ == "__main__":
    main()
