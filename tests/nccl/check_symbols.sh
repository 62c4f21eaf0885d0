#!/usr/bin/env bash
# Symbol parity of braid's libnccl.so.2 with NVIDIA's: every nccl*/pnccl* symbol NVIDIA's library
# exports (host API and device API) is exported by braid's, with the same binding (plain names
# weak aliases, p-names strong); braid's exports nothing else; the SONAME is libnccl.so.2 and the
# library does not depend on libbraid.
# Usage: check_symbols.sh NVIDIA_LIBNCCL BRAID_LIBNCCL. Exit 77 (skip) without NVIDIA's library.
set -euo pipefail
real=$1
ours=$2
if [[ ! -e $real ]]; then
  echo "SKIP: $real not found"
  exit 77
fi
exports() { nm -D --defined-only "$1" | awk 'NF == 3 { print $3, $2 }' | sort; }
real_syms=$(exports "$real" | awk '$1 ~ /^p?nccl/')
our_syms=$(exports "$ours")
fail=0

missing=$(join -v1 <(echo "$real_syms" | awk '{print $1}') <(echo "$our_syms" | awk '{print $1}'))
if [[ -n $missing ]]; then
  echo "FAIL: exported by $real but not by $ours:"
  echo "$missing" | sed 's/^/  /'
  fail=1
fi
binding=$(join <(echo "$real_syms") <(echo "$our_syms") | awk '$2 != $3 { print "  " $1 ": NVIDIA " $2 ", braid " $3 }')
if [[ -n $binding ]]; then
  echo "FAIL: binding differs (W = weak, T = strong):"
  echo "$binding"
  fail=1
fi
extra=$(echo "$our_syms" | awk '$1 !~ /^p?nccl/ { print "  " $1 }')
if [[ -n $extra ]]; then
  echo "FAIL: $ours exports names outside the NCCL API:"
  echo "$extra"
  fail=1
fi
soname=$(objdump -p "$ours" | awk '$1 == "SONAME" { print $2 }')
if [[ $soname != libnccl.so.2 ]]; then
  echo "FAIL: SONAME is '$soname', expected libnccl.so.2"
  fail=1
fi
if objdump -p "$ours" | awk '$1 == "NEEDED" { print $2 }' | grep -q '^libbraid'; then
  echo "FAIL: $ours depends on libbraid; it must be standalone"
  fail=1
fi
if [[ $fail == 0 ]]; then
  echo "OK: $(echo "$real_syms" | wc -l) NCCL symbols of $real exported by $ours with the same binding"
fi
exit $fail
