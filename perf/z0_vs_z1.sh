#!/bin/bash
# Non-blocking against blocking small calls (issue 38's check: all_reduce_perf -z 0 within 1.5x
# of -z 1 per call), for one or more builds of libbraid side by side under this tree's perf
# binary. Each repetition runs every library with -z 0 and -z 1; the order of the libraries and
# of the two forms flips every other repetition (ABBA), because on a shared VM the run that
# comes first after a switch is often the slower one, and a phase change of the machine (~0.2
# against ~0.65 us for an 8-byte 2-rank all-reduce) must hit every cell alike. Prints per size
# the median us per call of each form and library, -z 0 / -z 1, and -z 0 against the first
# library.
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
for r in $(seq "$reps"); do
  order=("${libs[@]}") forms="0 1"
  if ((r % 2 == 0)); then
    order=() forms="1 0"
    for ((k = ${#libs[@]} - 1; k >= 0; k--)); do order+=("${libs[k]}"); done
  fi
  for l in "${order[@]}"; do
    for z in $forms; do
      LD_LIBRARY_PATH=$l build/tools/braidrun -n "$ranks" build/perf/all_reduce_perf \
        -b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warm" -z "$z" -c 0 2>/dev/null |
        awk -v l="$l" -v z="$z" '/^ +[0-9]+ +[0-9]+ +float/ {print l, z, $1, $6}' >>"$out"
    done
  done
done
echo "# braidrun -n $ranks all_reduce_perf -b $min -e $max -f $factor -n $iters -c 0, $reps repetitions (ABBA)"
python3 - "$out" "${libs[@]}" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    lib, z, size, us = line.split()
    rows[(lib, z, int(size))].append(float(us))
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
        line += f" {z1:.2f} | {z0:.2f} | {z0 / z1:.2f} |"
        if first is None:
            first = z0
        else:
            line += f" {z0 / first:.2f} |"
    print(line)
EOF
