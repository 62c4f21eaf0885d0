#!/usr/bin/env bash
# The README's test command: install dependencies, build, run the whole suite (unit, multirank,
# fault, NCCL ABI, perf binaries, the fuzz targets' replays), then an ASan+UBSan build of the unit
# tier and a representative part of the multirank tier.
# Usage: tools/test.sh [--full] [--no-sanitizers] [--ucx]
#   --full  the release pass runs every test (without it, those tools/ci-extended.txt names stay
#           out: other rank counts and transports of cases that run), the sanitizer pass the whole
#           multirank tier, then the libFuzzer targets run for 30 s each (a clang build of its
#           own; tools/fuzz.sh). Without it the suite fits CI's budget (35 minutes on 2 cores):
#           the multirank cases left out of the sanitizer pass still run in the release pass, and
#           the fuzz targets' seeds and past crashes are replayed there and under the sanitizers.
#   --ucx   also the ucx tier (ctest -L ucx: every multirank and fault case with
#           BRAID_TRANSPORTS=ucx, on one host and across two emulated nodes; docs/transports.md)
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=1
ucx_tier=0
full=0
for arg in "$@"; do
  case $arg in
    --full) full=1 ;;
    --no-sanitizers) sanitizers=0 ;;
    --ucx) ucx_tier=1 ;;
    *) echo "usage: tools/test.sh [--full] [--no-sanitizers] [--ucx]" >&2; exit 2 ;;
  esac
done
# Seconds per phase, so that a slow CI run shows where its time went (the suite should stay well
# under 30 minutes).
phase_start=$SECONDS
phase() {
  echo "[test.sh] $1: $((SECONDS - phase_start)) s (total $SECONDS s)"
  phase_start=$SECONDS
}
# select_tests DIR LIST CTEST-FILTER...: the numbers (comma-separated) of the tests of DIR the
# filter (-L/-LE arguments) selects, less those LIST's expressions match (LIST "-": none). The
# selection is made here (awk over the names ctest lists, passed as test numbers with -I): ctest
# -E takes one regular expression, and CMake's regex engine silently matches nothing once the
# expression passes about a thousand characters (the whole list ran once that way).
select_tests() {
  local dir=$1 list=$2 skip_re='^$' listed kept total nkept
  shift 2
  [ "$list" = - ] || skip_re="$(grep -v '^#' "$list" | grep -v '^$' | paste -sd'|')"
  listed="$(ctest --test-dir "$dir" -N "$@" |
    sed -nE 's/^ *Test +#([0-9]+): (.*)$/\1 \2/p')"
  kept="$(printf '%s\n' "$listed" |
    awk -v re="$skip_re" '{ name = substr($0, index($0, " ") + 1) } name !~ re { print $1 }' |
    paste -sd,)"
  total=$(printf '%s\n' "$listed" | grep -c .)
  nkept=$(printf '%s\n' "$kept" | tr ',' '\n' | grep -c .)
  if [ "$list" = - ]; then
    echo "$dir: $nkept tests" >&2
  else
    echo "$dir: $nkept of $total tests ($list leaves the others out)" >&2
  fi
  if [ "$nkept" -eq 0 ] || { [ "$list" != - ] && [ "$nkept" -eq "$total" ]; }; then
    echo "$list selected $nkept of $total tests: check its expressions" >&2
    return 1
  fi
  printf '%s\n' "$kept"
}

# run_tests DIR NUMBERS: runs those tests of DIR, the unit tier two at a time
# (pure code on 2 cores; its RUN_SERIAL tests, which fork, listen or time deadlines, alone), then
# every other test one at a time (multi-rank tests fork up to 8 processes each). Fails when either
# run failed, after both ran. (The numbers go to -I only: ctest's -L beside -I drops some.)
run_tests() {
  local dir=$1 nums=$2 unit_re unit=() rest=() n rc=0
  unit_re=",$(ctest --test-dir "$dir" -N -L '^unit$' | sed -nE 's/^ *Test +#([0-9]+):.*/\1/p' |
    paste -sd,),"
  for n in ${nums//,/ }; do
    if [[ $unit_re == *",$n,"* ]]; then unit+=("$n"); else rest+=("$n"); fi
  done
  if [ "${#unit[@]}" -gt 0 ]; then
    ctest --test-dir "$dir" --output-on-failure --timeout 900 -j2 \
      -I "0,0,0,$(IFS=,; echo "${unit[*]}")" || rc=1
  fi
  if [ "${#rest[@]}" -gt 0 ]; then
    ctest --test-dir "$dir" --output-on-failure --timeout 900 -j1 \
      -I "0,0,0,$(IFS=,; echo "${rest[*]}")" || rc=1
  fi
  return $rc
}

bash tools/install-deps.sh
phase "dependencies"
jobs=$(nproc)

bash tools/preset.sh release
cmake --build build -j"$jobs"
phase "release build"
# The ucx tier (label ucx) only with --ucx; without --full, tools/ci-extended.txt's cases stay out.
extended=tools/ci-extended.txt
[ "$full" = 0 ] || extended=-
release=$(select_tests build "$extended" -LE '^ucx$')
run_tests build "$release"
phase "release tests"
if [ "$ucx_tier" = 1 ]; then
  ctest --test-dir build --output-on-failure --timeout 3600 -j1 -L '^ucx$'
  phase "ucx tier"
fi

if [ "$sanitizers" = 1 ]; then
  # The sanitizer pass runs the unit and multi-rank tiers only: no perf binaries to build, and
  # without --full a representative part of the multirank binaries (below) and of their cases
  # (tools/sanitizer-skip.txt says which, and why); every binary and case runs in the release
  # pass. The binaries kept: the executor's paths (collectives, board, inflight, device_stream),
  # the sharding layer's step (shard_step) and the quantized pipeline. Left to --full: the
  # hierarchical schedules and split communicators (the same executor over sub-communicators),
  # checkpoints, lazy connections, the large counts (never under the sanitizers) and the tuner,
  # placement, calibration, plan-cache, scale and ucx cases.
  multirank_subset='board|collectives|inflight|device_stream|shard_step|quantized'
  [ "$full" = 0 ] || multirank_subset=
  bash tools/preset.sh asan -DBRAID_BUILD_PERF=OFF "-DBRAID_MULTIRANK_TESTS=$multirank_subset"
  cmake --build build-asan -j"$jobs"
  phase "asan build"
  sanitizer_skip=tools/sanitizer-skip.txt
  [ "$full" = 0 ] || sanitizer_skip=-
  selected=$(select_tests build-asan "$sanitizer_skip" -L 'unit|multirank')
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    LSAN_OPTIONS=suppressions="$PWD/tools/lsan.supp" run_tests build-asan "$selected"
  phase "asan tests"
  if [ "$full" = 1 ]; then
    # libFuzzer targets (clang, ASan+UBSan), 30 s each, two at a time (docs/fuzzing.md; longer
    # runs: tools/fuzz.sh SECONDS).
    bash tools/fuzz.sh 30
    phase "fuzz build and runs"
  fi
fi
