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
# select_tests DIR LIST CTEST-FILTER...: the ctest arguments that run the tests of DIR the filter
# (-L/-LE arguments) selects, less those LIST's expressions match. The selection is made here (awk over the names
# ctest lists, passed as test numbers with -I): ctest -E takes one regular expression, and CMake's
# regex engine silently matches nothing once the expression passes about a thousand characters
# (the whole list ran once that way). Prints the arguments, one per line.
select_tests() {
  local dir=$1 list=$2 skip_re listed kept total nkept
  shift 2
  skip_re="$(grep -v '^#' "$list" | grep -v '^$' | paste -sd'|')"
  listed="$(ctest --test-dir "$dir" -N "$@" |
    sed -nE 's/^ *Test +#([0-9]+): (.*)$/\1 \2/p')"
  kept="$(printf '%s\n' "$listed" |
    awk -v re="$skip_re" '{ name = substr($0, index($0, " ") + 1) } name !~ re { print $1 }' |
    paste -sd,)"
  total=$(printf '%s\n' "$listed" | grep -c .)
  nkept=$(printf '%s\n' "$kept" | tr ',' '\n' | grep -c .)
  echo "$dir: $nkept of $total tests ($list leaves the others out)" >&2
  if [ "$nkept" -eq 0 ] || [ "$nkept" -eq "$total" ]; then
    echo "$list selected $nkept of $total tests: check its expressions" >&2
    return 1
  fi
  # (The numbers come from the filter's tests; ctest's -L beside -I drops some.)
  printf '%s\n' -I "0,0,0,$kept"
}

bash tools/install-deps.sh
phase "dependencies"
jobs=$(nproc)

bash tools/preset.sh release
cmake --build build -j"$jobs"
phase "release build"
# Multi-rank tests fork up to 8 processes each: run test binaries one at a time. The ucx tier
# (label ucx) only with --ucx.
release=(-LE '^ucx$')
if [ "$full" = 0 ]; then
  mapfile -t release < <(select_tests build tools/ci-extended.txt -LE '^ucx$')
  [ "${#release[@]}" -eq 2 ] || exit 1
fi
ctest --test-dir build --output-on-failure --timeout 900 -j1 "${release[@]}"
phase "release tests"
if [ "$ucx_tier" = 1 ]; then
  ctest --test-dir build --output-on-failure --timeout 3600 -j1 -L '^ucx$'
  phase "ucx tier"
fi

if [ "$sanitizers" = 1 ]; then
  # The sanitizer pass runs the unit and multi-rank tiers only: no perf binaries to build.
  bash tools/preset.sh asan -DBRAID_BUILD_PERF=OFF
  cmake --build build-asan -j"$jobs"
  phase "asan build"
  # Without --full, the multirank cases that repeat what others cover at more ranks or more
  # rounds (tools/sanitizer-skip.txt says which, and why) run in the release pass only.
  select=(-L 'unit|multirank')
  if [ "$full" = 0 ]; then
    mapfile -t select < <(select_tests build-asan tools/sanitizer-skip.txt -L 'unit|multirank')
    [ "${#select[@]}" -eq 2 ] || exit 1
  fi
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    LSAN_OPTIONS=suppressions="$PWD/tools/lsan.supp" \
    ctest --test-dir build-asan --output-on-failure --timeout 900 -j1 "${select[@]}"
  phase "asan tests"
  if [ "$full" = 1 ]; then
    # libFuzzer targets (clang, ASan+UBSan), 30 s each, two at a time (docs/fuzzing.md; longer
    # runs: tools/fuzz.sh SECONDS).
    bash tools/fuzz.sh 30
    phase "fuzz build and runs"
  fi
fi
