#!/usr/bin/env python3
"""Runs a perf binary (usually under braidrun) and checks its nccl-tests-style output.

    check_perf_output.py [--expect-exit N] [--expect-wrong] [--coll NAME --nranks N]
                         [--json FILE] [--stderr-contains TEXT] [--max-relerr X]
                         [--traffic-nodes K] [--timeout S] -- cmd args...

Checks (each failure is reported with the offending line):
  - the exit status (default 0);
  - the header, the column header and the footer lines are present (exit 0 and 7 only);
  - every data row has 13 fields; #wrong is 0 in every row (or, with --expect-wrong, non-zero
    in at least one row and the footer says FAILED);
  - with --coll/--nranks: the size/count arithmetic and busbw = algbw * factor of the spec;
  - with --json: the file is valid JSON (python3 -m json.tool) with one result per row.
  - with --max-relerr X (runs with --quant): the column header says relerr where it says
    #wrong, the "# Quantized:" and "# Max relative error" lines are present, and the relerr of
    every row is a finite number <= X (or, with --expect-wrong, some row's is above the binary's
    bound and the footer says FAILED).
  - with --traffic-nodes K (runs with --traffic on K nodes): the traffic section has one line
    per row and side that ran, with the row's size and type; every side sent bytes within a node
    when a node holds more than one rank (K < nranks), and across nodes exactly when K > 1.
"""
import math
import argparse
import json
import subprocess
import sys

ELT = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
       "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}


def factor(coll, n):
    if coll == "all_reduce":
        return 2.0 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect-exit", type=int, default=0)
    ap.add_argument("--expect-wrong", action="store_true")
    ap.add_argument("--coll")
    ap.add_argument("--nranks", type=int)
    ap.add_argument("--json")
    ap.add_argument("--stderr-contains")
    ap.add_argument("--max-relerr", type=float)
    ap.add_argument("--traffic-nodes", type=int)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("missing the command")
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=a.timeout)
    except subprocess.TimeoutExpired as e:
        print("FAIL: timed out after %g s: %s" % (a.timeout, " ".join(cmd)))
        print((e.stdout or b"")[-4000:] if isinstance(e.stdout, str) else "")
        return 1
    out, err = p.stdout, p.stderr
    problems = []

    def fail(msg):
        problems.append(msg)

    if p.returncode != a.expect_exit:
        fail("exit status %d, expected %d" % (p.returncode, a.expect_exit))
    if a.stderr_contains and a.stderr_contains not in err:
        fail("stderr does not contain %r" % a.stderr_contains)

    rows = []
    if a.expect_exit in (0, 7) and p.returncode == a.expect_exit:
        needed_lines = ["# nccl-tests version braid-", "# Collective test starting:",
                        "#       size         count      type   redop    root     time   algbw",
                        "# Out of bounds values :", "# Avg bus bandwidth    :",
                        "# Collective test concluded:"]
        quant = a.max_relerr is not None
        if quant:
            needed_lines += ["# Quantized: --quant ", "# Max relative error   :",
                             "busbw    relerr     time   algbw   busbw    relerr"]
        for needed in needed_lines:
            if needed not in out:
                fail("missing line %r" % needed)
        for line in out.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            f = line.split()
            if len(f) != 13:
                fail("row with %d fields (want 13): %r" % (len(f), line))
                continue
            rows.append((line, f))
        if not rows:
            fail("no data rows")
        any_wrong = False
        for line, f in rows:
            for w in (f[8], f[12]):
                if w == "N/A":
                    continue
                if quant:
                    try:
                        err = float(w)
                    except ValueError:
                        fail("relerr is not a number: %r" % line)
                        continue
                    if not (math.isfinite(err) and err <= a.max_relerr):
                        any_wrong = True
                        if not a.expect_wrong:
                            fail("relerr %s above %g: %r" % (w, a.max_relerr, line))
                    continue
                try:
                    wn = int(w)
                except ValueError:
                    fail("#wrong is not a number: %r" % line)
                    continue
                if wn != 0:
                    any_wrong = True
                    if not a.expect_wrong:
                        fail("wrong elements: %r" % line)
            if a.coll and a.nranks:
                size, count, elt = int(f[0]), int(f[1]), ELT.get(f[2], 0)
                n = a.nranks
                want = count * elt * (n if a.coll in ("all_gather", "reduce_scatter", "alltoall")
                                      else 1)
                if size != want:
                    fail("size %d != %d for count %d of %s: %r" % (size, want, count, f[2], line))
                for t, alg, bus in ((f[5], f[6], f[7]), (f[9], f[10], f[11])):
                    if alg == "N/A":
                        continue
                    exp = float(alg) * factor(a.coll, n)
                    if abs(float(bus) - exp) > 0.016 + 0.01 * exp:
                        fail("busbw %s != algbw %s * %.3f: %r" % (bus, alg, factor(a.coll, n),
                                                                   line))
        if a.traffic_nodes is not None:
            if "# Traffic per operation: bytes sent" not in out:
                fail("missing the traffic section (--traffic)")
            traffic = [l.split() for l in out.splitlines()
                       if l.startswith("# ") and len(l.split()) == 8 and
                       l.split()[4] in ("out-of-place", "in-place")]
            sides = sum((f[5] != "N/A") + (f[9] != "N/A") for _, f in rows)
            if len(traffic) != sides:
                fail("%d traffic lines for %d sides that ran" % (len(traffic), sides))
            for t in traffic:
                intra, inter = float(t[5]), float(t[6])
                if not any(f[0] == t[1] and f[2] == t[2] for _, f in rows):
                    fail("traffic line for no row: %r" % " ".join(t))
                if a.nranks and a.traffic_nodes < a.nranks and intra <= 0:
                    fail("no intra-node bytes: %r" % " ".join(t))
                if (inter > 0) != (a.traffic_nodes > 1):
                    fail("inter-node bytes %g with %d node(s): %r" % (inter, a.traffic_nodes,
                                                                      " ".join(t)))
        if a.expect_wrong:
            if not any_wrong:
                fail("expected a non-zero #wrong, found none")
            if "FAILED" not in out:
                fail("footer does not say FAILED")
        elif "# Out of bounds values : 0 OK" not in out:
            fail("footer is not '# Out of bounds values : 0 OK'")

    if a.json and p.returncode == a.expect_exit:
        tool = subprocess.run([sys.executable, "-m", "json.tool", a.json],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if tool.returncode != 0:
            fail("python3 -m json.tool %s: %s" % (a.json, tool.stderr.strip()))
        try:
            with open(a.json) as fh:
                doc = json.load(fh)
            if len(doc.get("results", [])) != len(rows):
                fail("JSON has %d results, the table %d rows" % (len(doc.get("results", [])),
                                                                  len(rows)))
            for r in doc.get("results", []):
                for k in ("size", "count", "type", "redop", "root", "out_of_place", "in_place"):
                    if k not in r:
                        fail("JSON result without %r: %r" % (k, r))
                        break
                if a.max_relerr is not None:
                    for side in (r.get("out_of_place"), r.get("in_place")):
                        if side and "rel_error" not in side:
                            fail("JSON side without 'rel_error': %r" % r)
            if a.max_relerr is not None and "quant" not in doc.get("config", {}):
                fail("JSON config without 'quant'")
        except (OSError, ValueError) as e:
            fail("JSON file %s: %s" % (a.json, e))

    if problems:
        print("FAIL: %s" % " ".join(cmd))
        for m in problems[:20]:
            print("  - " + m)
        print("---- stdout (tail) ----\n" + out[-6000:])
        print("---- stderr (tail) ----\n" + err[-4000:])
        return 1
    print("OK: %s (%d rows)" % (" ".join(cmd), len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
