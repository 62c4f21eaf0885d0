#!/usr/bin/env bash
# The README's first command: install dependencies, build (release), and run the main job:
# an nccl-tests-style all-reduce sweep over 4 local ranks, on shared memory and then on TCP.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/preset.sh release
cmake --build build -j"$(nproc)" --target braid braidrun all_reduce_perf
echo "=== all_reduce_perf, 4 ranks, shared memory"
build/tools/braidrun -n 4 build/perf/all_reduce_perf -b 8 -e 256M -f 2
echo "=== all_reduce_perf, 4 ranks, TCP (BRAID_TRANSPORTS=tcp)"
BRAID_TRANSPORTS=tcp build/tools/braidrun -n 4 build/perf/all_reduce_perf -b 8 -e 256M -f 2
