#!/usr/bin/env bash
# Runs test binaries of the multirank and fault tiers with every job's ranks spread over the nodes
# of an emulated cluster (network namespaces made by tools/emucluster): rank r of an n-rank job in
# node r * NODES / n, the rendezvous in node 0 (tests/multirank/harness.h, BRAID_TEST_EMULATE).
# So the same tests that run on one host run across nodes, their inter-node traffic crossing the
# emulated links: with NODES=2, a 4-rank case is an emulated 2x2 cluster and an 8-rank case a 2x4.
#
#   tools/emulated-tier.sh NODES [--link RATE] -- BINARY [ARGS...] [-- BINARY [ARGS...]]...
#
# e.g. tools/emulated-tier.sh 2 -- build/tests/multirank_collectives_test --gtest_filter='Ucx/*'
# Needs root (exit 77, which ctest reports as skipped, elsewhere). The cluster is removed on
# every exit path; one killed with SIGKILL is swept by the next `emucluster up`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
emucluster="$here/emucluster"

[ $# -ge 3 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
nodes=$1
shift
link=()
if [ "${1:-}" = "--link" ]; then
  link=(--link "$2")
  shift 2
fi
[ "${1:-}" = "--" ] || { echo "emulated-tier: expected -- before the first binary" >&2; exit 2; }
shift
if [ "$(id -u)" != 0 ]; then
  echo "emulated-tier: needs root (network namespaces); skipped"
  exit 77
fi

name="et$$"
cleanup() { "$emucluster" down "$name" >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$emucluster" up "$name" "$nodes" "${link[@]}" >/dev/null || exit 1

export BRAID_TEST_EMULATE="$name:$nodes"
status=0
cmd=()
run() {
  [ ${#cmd[@]} -gt 0 ] || return 0
  echo "== ${cmd[*]} (across $nodes emulated nodes)"
  "${cmd[@]}" || status=1
  cmd=()
}
for arg in "$@"; do
  if [ "$arg" = "--" ]; then
    run
  else
    cmd+=("$arg")
  fi
done
run
exit $status
