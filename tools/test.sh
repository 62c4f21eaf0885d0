#!/usr/bin/env bash
# The README's test command: install dependencies, build, run the whole suite (unit, multirank,
# fault, NCCL ABI, perf binaries), then an ASan+UBSan build of the unit and multirank tiers and
# the libFuzzer targets.
# Usage: tools/test.sh [--no-sanitizers]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs=$(nproc)

cmake --preset release >/dev/null
cmake --build build -j"$jobs"
# Multi-rank tests fork up to 8 processes each: run test binaries one at a time.
ctest --test-dir build --output-on-failure --timeout 900 -j1

if [ "${1:-}" != "--no-sanitizers" ]; then
  cmake --preset asan >/dev/null
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    LSAN_OPTIONS=suppressions="$PWD/tools/lsan.supp" \
    ctest --test-dir build-asan --output-on-failure --timeout 900 -j1 -L 'unit|multirank'
  # libFuzzer targets (clang, ASan+UBSan), 60 s each, two at a time (docs/fuzzing.md).
  bash tools/fuzz.sh
fi
