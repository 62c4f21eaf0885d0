#!/usr/bin/env python3
"""Tests of perf/compare --coll (label perf).

    compare_test.py COMPARE BUILD smoke allgather|reducescatter
    compare_test.py COMPARE BUILD bad-coll
    compare_test.py COMPARE BUILD slow-phase
    compare_test.py COMPARE BUILD auto-iters

smoke: perf/compare at 2 ranks over a few small sizes (-b 8 -e 64K -f 5: 8 B rounds to no element
and is skipped; 40, 200, 1000, 5000, 25000 B round down to whole 16-byte units per rank). Passes
when the run exits 0, the header names the collective, the Gloo column is reported absent, the
table has exactly the rounded sizes, the braid columns have a number in every row, and every
Open MPI column that ran (was not reported in "# FAILED peer columns") has a number in the same
rows (all columns round alike). A failed peer column does not fail the test, as for
perf_compare_smoke: the peers are baselines.
bad-coll: perf/compare --coll bogus exits 2 and names the flag on stderr.
slow-phase: the slow-phase reruns, with the probe's values given (BRAID_COMPARE_FAKE_PROBES,
cross-core round trips in ns) over the braid columns, 2 repetitions: a run whose probe rose over
twice the median is run again and replaced when the rerun probes better; a run that stays slow
through both rerun passes is named in the medians; a pass whose median probe is over 300 ns gets a
"# whole pass slow" line (and one at 100 ns none); --no-probe prints no slow-phase line; with one
CPU (taskset) the probe cannot run and the line says the phase was not checked.
auto-iters: --iters auto with --auto-seconds 0.0011 over 8 B-32 KiB (-f 8), braid's columns:
each has a "# iters" line whose bands cover the sweep's sizes in order, once each, with counts in
1-2-5 steps from 10 to 100000 that never grow with the size; its command shows its first band
(sizes, count, a twentieth as warm-up but at least 2); the table holds every size with a number
in both columns; --iters that is neither a number nor auto exits non-zero naming it.
"""
import os
import re
import subprocess
import sys

TITLE = {"allgather": "all-gather", "reducescatter": "reduce-scatter"}


def rounded_sizes(lo, hi, factor, n, elt=4):
    """The table's sizes: per-rank count rounded down to whole 16-byte units, zeros dropped."""
    out = []
    size = lo
    while size <= hi:
        per_rank = (size // elt) // n // (16 // elt) * (16 // elt)
        if per_rank:
            out.append(per_rank * n * elt)
        size *= factor
    return out


def run_compare(cmd, timeout):
    """Runs perf/compare, echoes its output; the problems so far (its exit status) and its
    stdout's lines."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    problems = [] if p.returncode == 0 else ["exit status %d" % p.returncode]
    return problems, p.stdout.splitlines()


def smoke(compare, build, coll):
    n = 2
    cmd = [compare, "-n", str(n), "--coll", coll, "--build", build, "-b", "8", "-e", "64K",
           "-f", "5", "--iters", "3", "--reps", "1"]
    problems, lines = run_compare(cmd, 280)
    if not any(l.startswith("# perf/compare: %s" % TITLE[coll]) for l in lines):
        problems.append("no header line naming %s" % TITLE[coll])
    if not any(l.startswith("# gloo-tcp: absent") for l in lines):
        problems.append("no note that the gloo column is absent")
    failed_peers = set()
    for l in lines:
        if l.startswith("# FAILED peer columns"):
            failed_peers.update(x.strip() for x in l.split(":", 1)[1].split(","))
    header = [l for l in lines if l.split()[:1] == ["size(B)"]]
    if len(header) != 1:
        problems.append("no table header")
        names = []
    else:
        names = header[0].split()[1:]
    if "gloo-tcp" in names:
        problems.append("a gloo-tcp column for %s" % coll)
    rows = {}
    for l in lines:
        f = l.split()
        if f and not l.startswith("#") and f[0].isdigit():
            rows[int(f[0])] = dict(zip(names, f[1:]))
    want = rounded_sizes(8, 64 << 10, 5, n)
    if sorted(rows) != want:
        problems.append("table sizes %s, want %s" % (sorted(rows), want))
    for name in names:
        if "/" in name or name in failed_peers:
            continue
        for size in want:
            cell = rows.get(size, {}).get(name, "-")
            try:
                float(cell)
            except ValueError:
                problems.append("%s has no number at %d B: %r" % (name, size, cell))
    for name in ("braid-shm", "braid-tcp"):
        if name not in names:
            problems.append("no %s column" % name)
    for x in problems:
        print("FAIL: " + x)
    return 1 if problems else 0


def bad_coll(compare, build):
    p = subprocess.run([compare, "--coll", "bogus", "--build", build], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=50)
    print(p.returncode, p.stderr)
    ok = p.returncode == 2 and "--coll" in p.stderr and "invalid choice" in p.stderr
    if not ok:
        print("FAIL: want exit 2 and a message naming --coll")
    return 0 if ok else 1


def slow_phase(compare, build):
    base = [compare, "-n", "2", "--build", build, "-b", "8", "-e", "64", "-f", "8", "--iters",
            "3", "--reps", "2", "--only", "braid-shm,braid-tcp"]
    # Probes come in pairs around each run: rep 1 shm, rep 1 tcp, rep 2 shm, rep 2 tcp, then
    # the reruns. The first run's second probe is slow.
    cases = [
        ("100,450,100", [], "1 run(s) over 2x it, run again 1 time(s), 1 replaced; 0 still slow"),
        # Every probe from rep 2's tcp run on is slow: that run and its reruns stay slow.
        ("100,100,100,100,100,100,100,450", [], "1 run(s) over 2x it, run again 2 time(s), "
                                                "0 replaced; 1 still slow (in the medians of: "
                                                "braid-tcp rep 2)"),
        ("100,450,100", ["--no-probe"], None),
    ]
    problems = []
    for fake, extra, want in cases:
        env = dict(os.environ, BRAID_COMPARE_FAKE_PROBES=fake)
        p = subprocess.run(base + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=200, env=env)
        print(p.stdout)
        print(p.stderr, file=sys.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("# slow phase:")]
        if any(l.startswith("# whole pass slow:") for l in p.stdout.splitlines()):
            problems.append("%s %s: a whole-pass line at a 100 ns median" % (fake, extra))
        if p.returncode != 0:
            problems.append("%s %s: exit status %d" % (fake, extra, p.returncode))
        if want is None and lines:
            problems.append("%s %s: a slow-phase line without probes" % (fake, extra))
        if want is not None and (len(lines) != 1 or want not in lines[0]):
            problems.append("%s: want a line with %r, got %r" % (fake, want, lines))
    # Every probe slow: no run stands out from the median, but the pass is named slow.
    env = dict(os.environ, BRAID_COMPARE_FAKE_PROBES="450")
    p = subprocess.run(base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=200, env=env)
    print(p.stdout)
    whole = [l for l in p.stdout.splitlines() if l.startswith("# whole pass slow:")]
    if p.returncode != 0 or len(whole) != 1 or "450 ns is over 300 ns" not in whole[0]:
        problems.append("every probe at 450 ns: want exit 0 and one whole-pass line, got exit %d, "
                        "%r" % (p.returncode, whole))
    # One CPU: the probe cannot run, and the line says the phase was not checked.
    env = {k: v for k, v in os.environ.items() if k != "BRAID_COMPARE_FAKE_PROBES"}
    p = subprocess.run(["taskset", "-c", "0"] + base, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=200, env=env)
    print(p.stdout)
    if p.returncode != 0 or "# slow phase: not checked" not in p.stdout:
        problems.append("one CPU: want exit 0 and a 'not checked' line, got exit %d"
                        % p.returncode)
    for x in problems:
        print("FAIL: " + x)
    return 1 if problems else 0


def auto_iters(compare, build):
    sweep = [8, 64, 512, 4096, 32768]
    steps = {100000, 50000, 20000, 10000, 5000, 2000, 1000, 500, 200, 100, 50, 20, 10}
    cmd = [compare, "-n", "2", "--build", build, "-b", "8", "-e", "32K", "-f", "8", "--iters",
           "auto", "--auto-seconds", "0.0011", "--reps", "1", "--only", "braid-shm,braid-tcp",
           "--no-probe"]
    problems, lines = run_compare(cmd, 250)
    for name in ("braid-shm", "braid-tcp"):
        head = "# iters %s (auto, about 0.0011 s a size): " % name
        found = [l[len(head):] for l in lines if l.startswith(head)]
        if len(found) != 1:
            problems.append("%s: want one line starting %r, got %d" % (name, head, len(found)))
            continue
        covered, counts, bands = [], [], []
        for band in found[0].split("; "):
            m = re.fullmatch(r"(\d+) at (\d+)(?:-(\d+))? B", band)
            if not m:
                problems.append("%s: bad band %r" % (name, band))
                continue
            it, b, e = int(m.group(1)), int(m.group(2)), int(m.group(3) or m.group(2))
            bands.append((it, b, e))
            in_band = [s for s in sweep if b <= s <= e]
            if not in_band or in_band[0] != b or in_band[-1] != e:
                problems.append("%s: band %r does not start and end at sizes of the sweep"
                                % (name, band))
            covered += in_band
            counts.append(it)
        if covered != sweep:
            problems.append("%s: bands cover %s, want %s" % (name, covered, sweep))
        if any(c not in steps for c in counts) or counts != sorted(counts, reverse=True):
            problems.append("%s: counts %s not in 1-2-5 steps or growing" % (name, counts))
        if bands:
            it, b, e = bands[0]
            shown = "-b %d -e %d -f 8 -n %d -w %d " % (b, e, it, max(2, it // 20))
            if not any(l.startswith("#   %s" % name) and shown in l for l in lines):
                problems.append("%s: the command does not show the first band (%r)"
                                % (name, shown))
    rows = {}
    for l in lines:
        f = l.split()
        if f and not l.startswith("#") and f[0].isdigit():
            rows[int(f[0])] = f[1:3]
    if sorted(rows) != sweep:
        problems.append("table sizes %s" % sorted(rows))
    for size, cells in rows.items():
        for cell in cells:
            try:
                float(cell)
            except ValueError:
                problems.append("no number at %d B: %r" % (size, cells))
    bad = subprocess.run([compare, "--build", build, "--iters", "lots"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=50)
    if bad.returncode == 0 or "--iters" not in bad.stderr or "lots" not in bad.stderr:
        problems.append("--iters lots: want a failure naming it, got exit %d, %r"
                        % (bad.returncode, bad.stderr))
    for x in problems:
        print("FAIL: " + x)
    return 1 if problems else 0


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: compare_test.py COMPARE BUILD smoke COLL | bad-coll | slow-phase | "
                 "auto-iters")
    compare, build, case = sys.argv[1:4]
    if case == "smoke" and len(sys.argv) == 5 and sys.argv[4] in TITLE:
        return smoke(compare, build, sys.argv[4])
    if case == "bad-coll":
        return bad_coll(compare, build)
    if case == "slow-phase":
        return slow_phase(compare, build)
    if case == "auto-iters":
        return auto_iters(compare, build)
    sys.exit("compare_test.py: unknown case %s" % " ".join(sys.argv[3:]))


if __name__ == "__main__":
    sys.exit(main())
