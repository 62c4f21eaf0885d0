#!/bin/bash
# Non-blocking against blocking small calls (issue 38's check: all_reduce_perf -z 0 within 1.5x
# of -z 1 per call), for one or more builds of libbraid side by side under this tree's perf
# binary. Each repetition runs every library with -z 0 and -z 1, in an order rotated by one every
# repetition (below), because on a shared VM the first run of a repetition is often the slower
# one, and a phase change of the machine (~0.2 against ~0.65 us for an 8-byte 2-rank all-reduce)
# must hit every cell alike. Prints per size the median us per call of each form and library,
# -z 0 / -z 1, and -z 0 against the first library, each as the median of the per-repetition
# ratios (runs next to each other share the machine's phase; the ratio of the two medians is
# printed too, in brackets). Checked with an identical copy of one library as the second: 0.92-1.05
# at 8 B-4 KiB with 24 repetitions, above and below 1 (the old order, flipped every other
# repetition, read 0.81-0.97).
#
#   perf/z0_vs_z1.sh [-n RANKS] [-r REPS] [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] LIBDIR...
#
# At S < MAX the harness keeps calls of size S in flight behind each other (MAX / S buffer regions,
# at most 8 calls); at S = MAX each call waits for the one before: -b S -e S times that alone.
# LIBDIR: a directory holding a libbraid.so.0 (e.g. build/src, or the build/src of a worktree of
# an older commit where only `ninja braid` was built); the perf binary's RUNPATH lets
# LD_LIBRARY_PATH choose it. Times are all_reduce_perf's out-of-place us per call (float sum,
# -c 0). Without LIBDIR: this tree's build/src alone.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=2 reps=8 min=8 max=4096 factor=2 iters=20000
while getopts "n:r:b:e:f:i:" o; do
  case $o in
    n) ranks=$OPTARG ;; r) reps=$OPTARG ;; b) min=$OPTARG ;; e) max=$OPTARG ;;
    f) factor=$OPTARG ;; i) iters=$OPTARG ;;
    *) sed -n '2,18p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
libs=("$@")
[ ${#libs[@]} -ge 1 ] || libs=(build/src)
for l in "${libs[@]}"; do
  [ -e "$l/libbraid.so.0" ] || { echo "$l/libbraid.so.0: not built" >&2; exit 2; }
done
for f in build/tools/braidrun build/perf/all_reduce_perf; do
  [ -x "$f" ] || { echo "$f: not built (cmake --build build --target braidrun all_reduce_perf)" >&2; exit 2; }
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
warm=$((iters / 10))
# Every run is one (library, form). Repetition r runs them all in the base order (each library's
# -z 0 then -z 1) rotated by r: over a multiple of 2 x libraries repetitions each run takes every
# position once. (Flipping the whole order every other repetition left one run first after each
# flip, and on this VM the first of a repetition is often the slower: an identical copy of the
# library listed second read 3-19 % faster.)
runs=()
for l in "${libs[@]}"; do runs+=("$l 0" "$l 1"); done
for r in $(seq "$reps"); do
  for ((k = 0; k < ${#runs[@]}; k++)); do
    read -r l z <<<"${runs[(k + r) % ${#runs[@]}]}"
    LD_LIBRARY_PATH=$l build/tools/braidrun -n "$ranks" build/perf/all_reduce_perf \
      -b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warm" -z "$z" -c 0 2>/dev/null |
      awk -v r="$r" -v l="$l" -v z="$z" '/^ +[0-9]+ +[0-9]+ +float/ {print r, l, z, $1, $6}' >>"$out"
  done
done
echo "# braidrun -n $ranks all_reduce_perf -b $min -e $max -f $factor -n $iters -c 0, $reps repetitions (rotated order)"
echo "# ratios: median of the per-repetition ratios (ratio of the medians in brackets)"
python3 - "$out" "${libs[@]}" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
by_rep = {}
for line in open(sys.argv[1]):
    rep, lib, z, size, us = line.split()
    rows[(lib, z, int(size))].append(float(us))
    by_rep[(int(rep), lib, z, int(size))] = float(us)
def paired(a, b, size):
    """Median over the repetitions that ran both of a's time / b's (a, b: (lib, z))."""
    r = [by_rep[(k, *a, size)] / by_rep[(k, *b, size)] for k in {key[0] for key in by_rep}
         if (k, *a, size) in by_rep and (k, *b, size) in by_rep]
    return statistics.median(r)
libs = sys.argv[2:]
head = "| bytes |"
for k, lib in enumerate(libs):
    head += f" {lib} -z 1 | -z 0 | z0/z1 |" + (" z0 / first |" if k else "")
print(head)
print("|" + " --- |" * (1 + 3 * len(libs) + len(libs) - 1))
for size in sorted({k[2] for k in rows}):
    line = f"| {size} |"
    first = None
    for lib in libs:
        z1 = statistics.median(rows[(lib, "1", size)])
        z0 = statistics.median(rows[(lib, "0", size)])
        line += f" {z1:.2f} | {z0:.2f} | {paired((lib, '0'), (lib, '1'), size):.2f} ({z0 / z1:.2f}) |"
        if first is None:
            first = (lib, z0)
        else:
            line += f" {paired((lib, '0'), (first[0], '0'), size):.2f} ({z0 / first[1]:.2f}) |"
    print(line)
EOF
