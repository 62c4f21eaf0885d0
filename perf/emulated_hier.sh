#!/usr/bin/env bash
# emulated_hier.sh: braid's flat and hierarchical algorithms against Open MPI on an emulated
# cluster (docs/emulated-cluster.md), one run, interleaved repetitions, medians
# (docs/hierarchical.md has the table this prints). Needs root, a release build with braidrun and
# the perf binaries, and mpicc/mpirun.
#
#   perf/emulated_hier.sh [--build DIR] [--shape GxM] [--link RATE] [--nics K]
#                         [--size BYTES[,BYTES...]] [--reps R] [--iters N] [--no-mpi]
#                         [--colls C[,C...]] [--algos A[,A...]] [--transports T[/T...]]
#                         [--fit-bytes S] [--nominal-inter]
#
# Per repetition, in this order: for all-gather, reduce-scatter and all-reduce, braid's perf
# binary under `braidrun --emulate GxM --link RATE` with each algorithm forced (-A) and with the
# tuner's choice (row `tuner`), then Open
# MPI's MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce (perf/peers/mpi_coll_perf.c)
# launched into the nodes of one cluster this script keeps up, with ranks mapped by slot and by
# node (btl self,tcp: vader cannot run across the emulated nodes, whose hosts share one name and
# one /dev/shm). braid rows: the out-of-place time of the nccl-tests row (warm-up 1, N
# iterations); Open MPI rows: the slowest rank's time per call. Every row is checked (#wrong 0,
# or mpi_coll_perf's check); a failure stops the script. Load averages are printed before and
# after, since another job on the machine slows the ranks (the shaped link should dominate).
# Several sizes (--size 1M,16M,64M as bytes) run one after another inside each repetition;
# --no-mpi leaves Open MPI out (for the tuner's pick against the forced algorithms); --colls
# runs only the named collectives (allgather, reducescatter, allreduce; default all three);
# --algos only the named braid rows (ring, rail_ring, hring, ho_ring, torus2d, hier_leader, tuner;
# those a collective does not have are left out of it). --nics K gives every node K links
# (braidrun --emulate --nics K: local rank l on eth(l mod K), each link shaped at RATE), adds the
# rail-aligned ring (rail_ring) to the rows, and predicts with K NICs a node. --transports runs every braid row once per
# transport list, BRAID_TRANSPORTS=T (e.g. shm,tcp/shm,ucx: shm within a node, braid's own TCP
# against UCX across the emulated links), interleaved within each repetition; the first list's
# rows are the ones the summary compares, and a line per row gives each other list's median over
# the first's.
# Before the repetitions, one job calibrates the cluster's links into a profile
# (BRAID_LINK_PROFILE) that every braid row then reads, so that the tuner of each row and the
# simulator (perf/sim_at_scale, same shape, K NICs per node) see the same link model (with
# --fit-bytes S, the intra-node bandwidth is braid-info --profile's fit to all-gathers of S bytes
# inside every node at once, docs/sharding.md, instead of the ping-pong's; --nominal-inter
# predicts with the shaped rate as the inter-node bandwidth, RATE x K a node, frame headers
# included, instead of the calibrated one); after the
# medians a summary prints, per collective and size, each braid row against its predicted time,
# the flat ring and Open MPI's best, and the tuner's pick against the fastest forced algorithm.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build shape=2x2 link=1gbit sizes=$((64 << 20)) reps=3 iters=3 mpi=1 nics=1 fit_bytes=0 nominal_inter=0
colls=allgather,reducescatter,allreduce only_algos="" transports=
while (($#)); do
  case $1 in
    --no-mpi) mpi=0; shift; continue ;;
    --nominal-inter) nominal_inter=1; shift; continue ;;
    --build) build=$2 ;;
    --shape) shape=$2 ;;
    --link) link=$2 ;;
    --nics) nics=$2 ;;
    --fit-bytes) fit_bytes=$2 ;;
    --size) sizes=$2 ;;
    --colls) colls=$2 ;;
    --algos) only_algos=$2 ;;
    --transports) transports=$2 ;;
    --reps) reps=$2 ;;
    --iters) iters=$2 ;;
    *) echo "usage: $0 [--build DIR] [--shape GxM] [--link RATE] [--nics K] [--size BYTES[,BYTES...]] [--reps R] [--iters N] [--no-mpi] [--colls C[,C...]] [--algos A[,A...]] [--transports T[/T...]] [--fit-bytes S] [--nominal-inter]" >&2; exit 2 ;;
  esac
  shift 2
done
g=${shape%x*} m=${shape#*x} n=$((g * m))
[[ $nics =~ ^[0-9]+$ ]] && ((nics >= 1 && nics <= 16)) ||
  { echo "$0: --nics '$nics': expected 1..16 links per node" >&2; exit 2; }
[[ $fit_bytes =~ ^[0-9]+$ ]] || { echo "$0: --fit-bytes '$fit_bytes': expected bytes" >&2; exit 2; }
emulate=(--emulate "$shape" --link "$link")
((nics > 1)) && emulate+=(--nics "$nics")
IFS=, read -r -a size_list <<<"$sizes"
IFS=, read -r -a coll_list <<<"$colls"
for c in "${coll_list[@]}"; do
  [[ $c == allgather || $c == reducescatter || $c == allreduce ]] ||
    { echo "$0: --colls '$c': expected allgather, reducescatter or allreduce" >&2; exit 2; }
done
((${#coll_list[@]})) || { echo "$0: --colls '$colls': expected a list" >&2; exit 2; }
((${#size_list[@]})) || { echo "$0: --size '$sizes': expected bytes (e.g. 1048576,67108864)" >&2; exit 2; }
for v in "${size_list[@]}"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "$0: --size '$v': expected bytes (e.g. 1048576,67108864)" >&2; exit 2; }
done
# Network namespaces need root; 77 is ctest's "skipped" (perf_emulated_hier_smoke).
[[ $(id -u) == 0 ]] || { echo "$0: needs root (network namespaces); skipped" >&2; exit 77; }
mpiperf=$build/perf/mpi_coll_perf_emu
emu=hier$$
hosts=$(for ((i = 1; i <= g; ++i)); do printf '198.18.0.%d:%d,' "$i" "$m"; done)
hosts=${hosts%,}
if ((mpi)); then
  mpicc -O2 -o "$mpiperf" perf/peers/mpi_coll_perf.c
  cleanup() { tools/emucluster down "$emu" >/dev/null 2>&1 || true; }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  tools/emucluster up "$emu" "$g" --link "$link" --nics "$nics" >/dev/null
fi

# The link model, measured once (rank 0 writes the profile; docs/hierarchical.md).
workdir=$(mktemp -d)
profile=$workdir/link.profile
trap 'rm -rf "$workdir"' EXIT
if ((mpi)); then trap 'cleanup; rm -rf "$workdir"' EXIT; fi
if ! out=$("$build/tools/braidrun" "${emulate[@]}" -- env BRAID_LINK_PROFILE="$profile" \
  "$build/perf/all_reduce_perf" -b 8 -e 8 -n 1 -w 0 2>&1) || [[ ! -s $profile ]]; then
  echo "$out" >&2
  echo "$0: the calibration job wrote no link profile ($profile)" >&2
  exit 1
fi
if ((fit_bytes > 0)); then
  # The intra-node bandwidth of all-gathers inside every node at once (what collectives get of a
  # node's shared cores and memory); the inter-node link stays the ping-pong's, one NIC pair
  # times K, so that nothing in the prediction was fitted to the algorithms it compares.
  fitted=$workdir/fitted.profile
  if ! out=$("$build/tools/braidrun" "${emulate[@]}" -- "$build/tools/braid-info" --profile \
    "$fitted" --fit-bytes "$fit_bytes" 2>&1) || [[ ! -s $fitted ]]; then
    echo "$out" >&2
    echo "$0: braid-info --profile wrote no fitted profile ($fitted)" >&2
    exit 1
  fi
  { echo "version 1"; awk '$1 ~ /^intra\./' "$fitted"; awk '$1 ~ /^inter\./' "$profile"; } \
    >"$workdir/combined.profile"
  mv "$workdir/combined.profile" "$profile"
fi
lp() { awk -v k="$1" '$1 == k {print $2}' "$profile"; }
intra_lat=$(lp intra.alpha_s) intra_bw=$(lp intra.beta_bytes_s)
inter_lat=$(lp inter.alpha_s) inter_bw=$(lp inter.beta_bytes_s)
[[ -n $intra_lat && -n $intra_bw && -n $inter_lat && -n $inter_bw ]] ||
  { echo "$0: link profile without both classes:" >&2; cat "$profile" >&2; exit 1; }
predict_inter_bw=$inter_bw
if ((nominal_inter)); then
  rate=${link%%,*}
  predict_inter_bw=$(awk -v r="${rate,,}" -v k="$nics" 'BEGIN {
    n = r + 0; u = substr(r, length(n "") + 1)
    m = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : u == "bit" ? 1 : -1
    if (m < 0 || n <= 0) exit 1
    printf "%.17g", n * m / 8 * k }') ||
    { echo "$0: --nominal-inter: cannot read a rate from --link '$link'" >&2; exit 2; }
fi
# Predictions: predicted["SIZE COLL braid:ALGO"] in us, picks["SIZE COLL"] = the tuner's pick.
declare -A predicted picks
sim_colls=$(IFS=,; echo "${coll_list[*]}")
while read -r c b a rest; do
  if [[ $a == tuner ]]; then
    picks["$b $c"]=${rest#picks }
  elif [[ $b =~ ^[0-9]+$ && $rest =~ ^[0-9.]+ ]]; then
    predicted["$b $c braid:$a"]=$(awk -v t="${rest%% *}" 'BEGIN {printf "%.0f", t * 1e6}')
  fi
done < <("$build/perf/sim_at_scale" --nodes "$g" --gpus "$m" --nics "$nics" --intra-bw "$intra_bw" \
  --intra-lat "$intra_lat" --inter-bw "$predict_inter_bw" --inter-lat "$inter_lat" --sizes "$sizes" \
  --colls "$sim_colls" --algos ring,rail_ring,hring,ho_ring,torus2d,hier_leader --threads 1)
for key in "${!picks[@]}"; do predicted["$key braid:tuner"]=${predicted["$key braid:${picks[$key]}"]:-}; done

declare -A times
braid_row() {  # coll binary algo [transport]
  local out t
  local force=(-A "$3")
  [[ $3 == tuner ]] && force=()  # the tuner's own choice (its calibrated model)
  local tenv=() suffix=""
  if [[ -n ${4:-} ]]; then
    tenv=(BRAID_TRANSPORTS="$4")
    [[ $4 != "${transport_list[0]}" ]] && suffix="@$4"
  fi
  out=$("$build/tools/braidrun" "${emulate[@]}" -- \
    env BRAID_LINK_PROFILE="$profile" ${tenv[@]+"${tenv[@]}"} \
    "$build/perf/$2" -b "$size" -e "$size" -n "$iters" -w 1 ${force[@]+"${force[@]}"} 2>&1) || {
    echo "$out" >&2
    echo "braid $1 $3 failed" >&2
    exit 1
  }
  local row
  row=$(echo "$out" | awk -v s="$size" '$1 == s')
  [[ $(echo "$row" | awk '{print $9}') == 0 ]] || { echo "$out" >&2; echo "braid $1 $3: wrong elements" >&2; exit 1; }
  t=$(echo "$row" | awk '{print $6}')
  times["$size $1 braid:$3$suffix"]+="$t "
  printf '  %-10s %-14s braid %-12s %9s us\n' "$size" "$1" "$3${4:+ ($4)}" "$t"
}
mpi_row() {  # coll mapping
  local out t
  out=$(tools/emucluster exec "$emu" 0 -- mpirun --allow-run-as-root -np "$n" --host "$hosts" \
    --map-by "$2" --mca plm_rsh_agent "$PWD/tools/emucluster rsh $emu" \
    --mca oob_tcp_if_include eth0 --mca btl self,tcp --mca btl_tcp_if_include eth0 \
    "$mpiperf" "$1" "$size" "$iters" 2>&1) || { echo "$out" >&2; echo "mpi $1 $2 failed" >&2; exit 1; }
  t=$(echo "$out" | awk '/^mpi /{print $(NF-1)}')
  times["$size $1 ompi:by-$2"]+="$t "
  printf '  %-10s %-14s ompi  by-%-9s %9s us\n' "$size" "$1" "$2" "$t"
}

declare -A algos=([allgather]="ring hring ho_ring tuner" [reducescatter]="ring hring ho_ring tuner"
  [allreduce]="ring hring ho_ring torus2d hier_leader tuner")
# The rail-aligned ring differs from the ring only where a node has several NICs.
if ((nics > 1)); then for c in "${!algos[@]}"; do algos[$c]="ring rail_ring ${algos[$c]#ring }"; done; fi
declare -A bins=([allgather]=all_gather_perf [reducescatter]=reduce_scatter_perf
  [allreduce]=all_reduce_perf)
if [[ -n $only_algos ]]; then
  for c in "${!algos[@]}"; do
    kept=""
    for a in ${algos[$c]}; do [[ ,$only_algos, == *,$a,* ]] && kept+="$a "; done
    algos[$c]=$kept
  done
fi
IFS=/ read -r -a transport_list <<<"$transports"
((${#transport_list[@]})) || transport_list=("")
echo "# $shape nodes, link $link, $nics NIC(s) a node, $sizes bytes, $reps repetitions, $iters iterations; $(date -u +%FT%TZ)"
source_text="ping-pong"
((fit_bytes > 0)) && source_text="intra bandwidth fitted to $fit_bytes-byte all-gathers, the rest ping-pong"
echo "# link model ($source_text, every row's): intra $intra_lat s $intra_bw B/s, inter $inter_lat s $inter_bw B/s (a node's link)"
((nominal_inter)) && echo "# predictions with the shaped inter-node rate: $predict_inter_bw B/s a node"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
for ((r = 1; r <= reps; ++r)); do
  echo "# repetition $r (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for size in "${size_list[@]}"; do
    for coll in "${coll_list[@]}"; do
      for a in ${algos[$coll]}; do
        for t in "${transport_list[@]}"; do braid_row "$coll" "${bins[$coll]}" "$a" "$t"; done
      done
      if ((mpi)); then for map in slot node; do mpi_row "$coll" "$map"; done; fi
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# medians (us)"
declare -A med
for key in "${!times[@]}"; do
  med[$key]=$(echo "${times[$key]}" | tr ' ' '\n' | grep -v '^$' | sort -n | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}')
done
for key in "${!times[@]}"; do
  read -r ksize kcoll krow <<<"$key"
  printf '%-10s %-14s %-16s %9s   (%s)\n' "$ksize" "$kcoll" "$krow" "${med[$key]}" "${times[$key]% }"
done | sort -k1,1n -k2,2 -k3,3

# Per collective and size: each braid row's median against its prediction and the flat ring,
# then the tuner's pick against the fastest forced algorithm and braid's best against Open MPI's.
lt() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a < b)}'; }
ms() { awk -v t="$1" 'BEGIN {if (t == "") print "-"; else printf "%.2f", t / 1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b}'; }
echo "# summary (ms; pred: the simulator with the link model above)"
printf '%-10s %-14s %-12s %10s %10s %9s %8s\n' size collective row median pred meas/pred vs_ring
for size in "${size_list[@]}"; do
  for coll in "${coll_list[@]}"; do
    ring=${med["$size $coll braid:ring"]:-}
    best="" best_row=""
    for a in ${algos[$coll]}; do
      k="$size $coll braid:$a"
      t=${med[$k]:-}
      p=${predicted[$k]:-}
      printf '%-10s %-14s %-12s %10s %10s %9s %8s\n' "$size" "$coll" "$a" "$(ms "$t")" \
        "$(ms "$p")" "$(ratio "$t" "$p")" "$(ratio "$t" "$ring")"
      if [[ $a != tuner ]] && { [[ -z $best ]] || lt "$t" "$best"; }; then
        best=$t best_row=$a
      fi
    done
    for a in ${algos[$coll]}; do
      for t in "${transport_list[@]:1}"; do
        echo "$size $coll: $a over $t / over ${transport_list[0]}: $(ratio "${med["$size $coll braid:$a@$t"]:-}" "${med["$size $coll braid:$a"]:-}")"
      done
    done
    tuner=${med["$size $coll braid:tuner"]:-}
    echo "$size $coll: tuner (picks ${picks["$size $coll"]:-?}) / fastest forced ($best_row): $(ratio "$tuner" "$best")"
    if ((mpi)); then
      mbest=""
      for map in slot node; do
        t=${med["$size $coll ompi:by-$map"]:-}
        if [[ -z $mbest ]] || lt "$t" "$mbest"; then mbest=$t; fi
      done
      echo "$size $coll: Open MPI's best $(ms "$mbest") ms; braid's fastest / Open MPI's best: $(ratio "$best" "$mbest")"
    fi
  done
done
