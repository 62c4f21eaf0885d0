#!/usr/bin/env bash
# Builds braid's libFuzzer targets (clang, ASan+UBSan; tests/fuzz, docs/fuzzing.md) in build-fuzz/
# and runs each for BRAID_FUZZ_SECONDS (default 60) as a ctest test, two at a time. A crash, leak,
# sanitizer report, hang or oversized allocation fails its test; the input that did it is left in
# build-fuzz/tests/fuzz/artifacts/<target>/.
# Usage: tools/fuzz.sh [seconds per target]
set -euo pipefail
cd "$(dirname "$0")/.."

# Always passed, so that a run without an argument is 60 s even after one with another value.
bash tools/preset.sh fuzz -DBRAID_FUZZ_SECONDS="${1:-60}"
# Only the fuzz targets (and the layers they link): the rest of the tree is not needed here.
cmake --build build-fuzz --target fuzz_targets -j"$(nproc)"
ctest --test-dir build-fuzz -L fuzz -j2 --output-on-failure
