#!/usr/bin/env bash
# emulated_quant.sh: issue 12's benchmark of qgZ, the quantized reduce-scatter, against braid's
# flat fp16 ring reduce-scatter on an emulated cluster (docs/emulated-cluster.md): time and the
# bytes that crossed the node links, one run, interleaved repetitions, medians
# (docs/performance.md has the table this prints). Needs root and a release build with braidrun
# and reduce_scatter_perf.
#
#   perf/emulated_quant.sh [--build DIR] [--shape GxM] [--link RATE] [--size BYTES] [--reps R]
#                          [--iters N] [--type half|float|bfloat16] [--block G]
#                          [--codecs "int4 int8"] [--check]
#
# Per repetition, in this order: reduce_scatter_perf -A ring (the flat ring, unquantized), then
# reduce_scatter_perf --quant CODEC --block G for each codec, each under its own
# `braidrun --emulate GxM --link RATE` (which creates and removes its cluster), with --traffic:
# the bytes per operation the ranks sent to other nodes, from the transports' counters. Each row
# is checked by the perf binary (#wrong 0; quantized: the relative L2 error within the codec's
# bound, else exit 7); a failure stops the script. Time: the out-of-place column (warm-up 1,
# N iterations, averaged over ranks). At the end, per codec: the median time, the speedup over
# the ring (ring median / codec median) and the inter-node bytes relative to the ring's, with
# issue 12's targets for INT4 (bytes <= 0.27x, speedup >= 2.5x). --check: exit 3 when an INT4
# target is missed. Load averages are printed, since other jobs slow the ranks (2-core machine).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build shape=2x2 link=1gbit size=$((64 << 20)) reps=3 iters=3 type=half block=32
codecs="int4 int8" check=0
while (($#)); do
  case $1 in
    --build) build=$2 ;;
    --shape) shape=$2 ;;
    --link) link=$2 ;;
    --size) size=$2 ;;
    --reps) reps=$2 ;;
    --iters) iters=$2 ;;
    --type) type=$2 ;;
    --block) block=$2 ;;
    --codecs) codecs=$2 ;;
    --check)
      check=1
      shift
      continue
      ;;
    *)
      echo "usage: $0 [--build DIR] [--shape GxM] [--link RATE] [--size BYTES] [--reps R]" \
        "[--iters N] [--type T] [--block G] [--codecs \"int4 int8\"] [--check]" >&2
      exit 2
      ;;
  esac
  shift 2
done
case $size in  # the table prints bytes
  *K) size=$((${size%K} << 10)) ;;
  *M) size=$((${size%M} << 20)) ;;
  *G) size=$((${size%G} << 30)) ;;
esac
# Network namespaces need root; 77 is ctest's "skipped" (perf_emulated_quant_smoke).
[[ $(id -u) == 0 ]] || { echo "$0: needs root (network namespaces); skipped" >&2; exit 77; }
for f in "$build/tools/braidrun" "$build/perf/reduce_scatter_perf"; do
  [[ -x $f ]] || { echo "$0: $f not built" >&2; exit 2; }
done
# braidrun removes its cluster however its job ends; a braidrun killed with SIGKILL leaves one,
# which sweep removes (it only touches clusters whose owner process is gone).
trap 'tools/emucluster sweep >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM

declare -A times inter
run_row() {  # name, perf flags...
  local name=$1 out row tr
  shift
  out=$("$build/tools/braidrun" --emulate "$shape" --link "$link" -- \
    "$build/perf/reduce_scatter_perf" -b "$size" -e "$size" -d "$type" -n "$iters" -w 1 \
    --traffic "$@" 2>&1) || {
    echo "$out" >&2
    echo "$name failed (exit status above; 7: wrong elements or error above the bound)" >&2
    exit 1
  }
  row=$(echo "$out" | awk -v s="$size" '$1 == s')
  tr=$(echo "$out" | awk -v s="$size" '$1 == "#" && $2 == s && $5 == "out-of-place" {print $7}')
  [[ -n $row && -n $tr ]] || { echo "$out" >&2; echo "$name: no result row" >&2; exit 1; }
  times[$name]+="$(echo "$row" | awk '{print $6}') "
  inter[$name]+="$tr "
  printf '  %-6s %9s us  %8s  inter-node %11s B  (load %s)\n' "$name" \
    "$(echo "$row" | awk '{print $6}')" "$(echo "$row" | awk '{print $9}')" "$tr" \
    "$(cut -d' ' -f1 /proc/loadavg)"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

echo "# reduce-scatter, $shape nodes, link $link, $size bytes of $type per rank, block $block," \
  "$reps repetitions, $iters iterations; $(date -u +%FT%TZ)"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
echo "#   row     time (us)   #wrong/relerr   inter-node bytes per op (all ranks)"
for ((r = 1; r <= reps; ++r)); do
  echo "# repetition $r"
  run_row ring -A ring
  for c in $codecs; do run_row "$c" --quant "$c" --block "$block"; done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
ring_t=$(echo "${times[ring]}" | median)
ring_b=$(echo "${inter[ring]}" | median)
printf '# %-6s %12s %12s %16s %12s\n' row "median us" speedup "inter-node B" "bytes/ring"
printf '# %-6s %12s %12s %16s %12s\n' ring "$ring_t" 1.00 "$ring_b" 1.000
missed=0
for c in $codecs; do
  t=$(echo "${times[$c]}" | median)
  b=$(echo "${inter[$c]}" | median)
  speed=$(awk -v a="$ring_t" -v b="$t" 'BEGIN {printf "%.2f", a / b}')
  ratio=$(awk -v a="$b" -v b="$ring_b" 'BEGIN {printf "%.3f", a / b}')
  printf '# %-6s %12s %12s %16s %12s\n' "$c" "$t" "$speed" "$b" "$ratio"
  if [[ $c == int4 ]]; then
    awk -v s="$speed" -v q="$ratio" 'BEGIN {
      printf "# issue 12 (int4): inter-node bytes %.3fx the ring (target <= 0.27): %s; ", q, (q <= 0.27 ? "met" : "MISSED")
      printf "speedup %.2fx (target >= 2.5): %s\n", s, (s >= 2.5 ? "met" : "MISSED") }'
    awk -v s="$speed" -v q="$ratio" 'BEGIN {exit !(q <= 0.27 && s >= 2.5)}' || missed=1
  fi
done
((check && missed)) && exit 3
exit 0
