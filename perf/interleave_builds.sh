#!/bin/bash
# Latency of several builds of braid side by side: each repetition runs every build once, in
# turn, so that a change of the machine's phase (a shared VM moves between ~0.2 and ~0.65 us for
# an 8-byte 2-rank all-reduce within minutes) hits every build alike. Prints, per size, the
# median time of each build and the median over repetitions of its ratio to the first build
# (the ratio is taken within a repetition, which is what survives a phase change).
#
#   perf/interleave_builds.sh [-n RANKS] [-z 0|1] [-m AGG] [-r REPS] [-b MIN] [-e MAX] \
#       [-i ITERS] BUILD_DIR...
#
# BUILD_DIR: a build tree with tools/braidrun and perf/all_reduce_perf (e.g. a worktree of an
# older commit, configured and built with `ninja all_reduce_perf braidrun`). The first is the
# baseline. Times are all_reduce_perf's out-of-place us per call (float sum, -c 0).
set -euo pipefail
ranks=2 blocking=1 agg=1 reps=5 min=8 max=4096 iters=20000
while getopts "n:z:m:r:b:e:i:" o; do
  case $o in
    n) ranks=$OPTARG ;; z) blocking=$OPTARG ;; m) agg=$OPTARG ;; r) reps=$OPTARG ;;
    b) min=$OPTARG ;; e) max=$OPTARG ;; i) iters=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
for d in "$@"; do
  for f in tools/braidrun perf/all_reduce_perf; do
    [ -x "$d/$f" ] || { echo "$d/$f: not built" >&2; exit 2; }
  done
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
warm=$((iters / 10))
for r in $(seq "$reps"); do
  for d in "$@"; do
    "$d/tools/braidrun" -n "$ranks" "$d/perf/all_reduce_perf" -b "$min" -e "$max" -f 2 \
      -n "$iters" -w "$warm" -m "$agg" -z "$blocking" -c 0 2>/dev/null |
      awk -v d="$d" -v r="$r" '/^ +[0-9]+ +[0-9]+ +float/ {print r, d, $1, $6}' >>"$out"
  done
done
echo "# braidrun -n $ranks all_reduce_perf -b $min -e $max -f 2 -n $iters -m $agg -z $blocking;" \
  "$reps repetitions, $(date -u +%Y-%m-%dT%H:%MZ)"
python3 - "$out" "$@" <<'EOF'
import collections, os, statistics, sys
path, builds = sys.argv[1], sys.argv[2:]
t = collections.defaultdict(dict)  # (rep, size) -> build -> us
for line in open(path):
    r, d, size, us = line.split()
    t[(int(r), int(size))][d] = float(us)
sizes = sorted({s for _, s in t})
def name(d):  # "/tmp/base/build" -> "base"; "build" -> the checkout's directory name
    a = os.path.abspath(d)
    return os.path.basename(os.path.dirname(a)) if os.path.basename(a) == "build" else os.path.basename(a)
print("| bytes | " + " | ".join(str(s) for s in sizes) + " |")
print("| --- " * (len(sizes) + 1) + "|")
for d in builds:
    meds = [statistics.median(v[d] for (_, s), v in t.items() if s == size and d in v) for size in sizes]
    print("| %s | " % name(d) + " | ".join("%.2f" % m for m in meds) + " |")
for d in builds[1:]:
    ratios = []
    for size in sizes:
        rs = [v[d] / v[builds[0]] for (_, s), v in t.items() if s == size and d in v and builds[0] in v]
        ratios.append(statistics.median(rs))
    print("| %s / %s | " % (name(d), name(builds[0])) + " | ".join("%.2f" % x for x in ratios) + " |")
EOF
