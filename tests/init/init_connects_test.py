#!/usr/bin/env python3
"""A job connects only to its own listeners (issue 42, item 5).

    init_connects_test.py RECORDER BRAIDRUN ALL_REDUCE_PERF RANKS TRANSPORTS

Runs `braidrun -n RANKS all_reduce_perf` (one size, a few iterations: init, collectives,
destroy) with RECORDER (connect_recorder.so) preloaded into every process of the job, then checks
every connect() any of them made: a TCP connect must go to a port some process of the job
listened on, a unix connect to a name some process of the job bound. hwloc's "gl" plugin broke
this at every init (127.0.0.1:6000-6009, /tmp/.X11-unix/X0-9). Prints OK or FAIL with the
offending connects.
"""
import glob
import os
import subprocess
import sys
import tempfile


def main():
    recorder, braidrun, perf, ranks, transports = sys.argv[1:6]
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ)
        env["LD_PRELOAD"] = recorder
        env["BRAID_CONNECT_LOG"] = os.path.join(d, "log")
        if transports != "default":
            env["BRAID_TRANSPORTS"] = transports
        p = subprocess.run([braidrun, "-n", ranks, "--timeout", "120", perf, "-b", "64K",
                            "-e", "64K", "-n", "3", "-w", "1"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=180)
        if p.returncode != 0:
            print("FAIL: the job exited %d\n--- stdout\n%s\n--- stderr\n%s" %
                  (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
            return 1
        connects, listening_ports, bound = [], set(), set()
        files = glob.glob(os.path.join(d, "log.*"))
        for path in files:
            with open(path) as f:
                for line in f:
                    w = line.split()
                    if w[0] == "connect":
                        connects.append((os.path.basename(path), w))
                    elif w[0] == "listen" and w[1] in ("inet", "inet6"):
                        listening_ports.add(w[3])
                    elif w[0] in ("bind", "listen") and w[1] == "unix":
                        bound.add(w[2])
        # Every rank reached its rendezvous: without a connect the check below proves nothing.
        if not connects:
            print("FAIL: no connect recorded in %d process logs (is the recorder preloaded?)" %
                  len(files))
            return 1
        strangers = []
        for who, w in connects:
            ok = (w[1] in ("inet", "inet6") and w[3] in listening_ports) or \
                 (w[1] == "unix" and w[2] in bound)
            if not ok:
                strangers.append("%s: %s" % (who, " ".join(w)))
        if strangers:
            print("FAIL: connects to something no process of the job listens on:\n  " +
                  "\n  ".join(sorted(set(strangers))))
            return 1
        print("OK: %d connects over %d processes, all to the job's own listeners" %
              (len(connects), len(files)))
        return 0


if __name__ == "__main__":
    sys.exit(main())
