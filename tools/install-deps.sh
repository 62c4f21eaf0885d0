#!/usr/bin/env bash
# Installs braid's build and test dependencies from Debian's packages. Idempotent: packages that
# are already installed are left alone, so a second run does nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3
  libssl-dev                      # HMAC for the bootstrap handshake (required)
  libgtest-dev libgmock-dev       # tests
  libbenchmark-dev                # micro-benchmarks
  libhwloc-dev                    # topology discovery
  libibverbs-dev                  # InfiniBand / RoCE transport (compiled; runs where hardware exists)
  libucx-dev                      # UCX transport
  openmpi-bin libopenmpi-dev      # mpirun launch and the Open MPI comparison
  libgloo-dev                     # the Gloo comparison
  iproute2                        # emulated clusters (network namespaces, tc)
  clang libclang-rt-dev           # libFuzzer targets (tools/fuzz.sh); -rt-dev holds libFuzzer
  python3-torch                   # examples/pytorch_sharded.py and its ctests (CPU PyTorch 1.13)
  libtorch-dev pybind11-dev       # the torch.distributed backend (python/braid/torch, C++ extension)
  hipcc                           # the HIP build of the GPU kernels (ROCm 5.2: clang 15, device libs;
                                  # compiled for gfx90a, not run: no AMD GPU). 66 MB, ~28 s of apt
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
