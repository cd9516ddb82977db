#!/usr/bin/env bash
# all_reduce across two hosts: hierarchical (inside each host in shared memory, between one
# leader per host over tcp) against one flat ZeroMQ ring over every rank, in the same run.
# The two hosts are two network namespaces joined by a veth pair (as tests/integration/
# two_hosts_test.cpp makes them), RANKS_PER_HOST ranks on each; the bytes that cross between
# the hosts are read from the veth pair's counters. Needs root and iproute2.
#
#   tools/bench_two_hosts.sh [--build DIR] [--ranks-per-host N] [--sizes "1048576 16777216 67108864"]
#
# Prints a markdown table (and the machine); writes nothing else.
set -euo pipefail

build=build
per_host=2
sizes="1048576 16777216 67108864"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --ranks-per-host) per_host="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_two_hosts.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "bench_two_hosts.sh: needs root to make network namespaces" >&2; exit 1; }
command -v ip >/dev/null || { echo "bench_two_hosts.sh: no ip command: make deps installs iproute2" >&2; exit 1; }
bin=$(cd "$build/bin" && pwd)

id=$$
a=distrl-ba-$id; b=distrl-bb-$id; va=dba$id; vb=dbb$id
out=$(mktemp -d /tmp/distrl-two-hosts-XXXXXX)
cleanup() {
  for ns in "$a" "$b"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9; ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "$va" type veth peer name "$vb"
ip link set "$va" netns "$a"; ip link set "$vb" netns "$b"
ip -n "$a" addr add 10.78.0.1/24 dev "$va"; ip -n "$b" addr add 10.78.0.2/24 dev "$vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up; ip -n "$b" link set "$vb" up

# Bytes sent by both ends of the veth pair so far.
crossed() {
  echo $(( $(ip netns exec "$a" cat /sys/class/net/$va/statistics/tx_bytes) +
           $(ip netns exec "$b" cat /sys/class/net/$vb/statistics/tx_bytes) ))
}

port=29600
echo "all_reduce(SUM, float32) across 2 hosts x $per_host ranks (network namespaces joined by a veth pair; tcp between them)"
echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo
echo "| size | all_reduce | transport | time per call | bytes crossing per call | vs flat |"
echo "|---:|---|---|---:|---:|---:|"
for size in $sizes; do
  flat_bytes=0
  for mode in flat hierarchical; do
    port=$((port + 1))
    flag=""; [[ $mode == flat ]] && flag="--flat"
    before=$(crossed)
    pids=()
    for node in 0 1; do
      ns=$a; [[ $node == 1 ]] && ns=$b
      ip netns exec "$ns" "$bin/distrl-launch" --nnodes 2 --node-rank $node --nproc "$per_host" \
        --master-addr 10.78.0.1 --master-port $port -- "$bin/distrl-bench" allreduce-worker --out "$out/$mode-$size.csv" \
        $flag "$size" >"$out/$mode-$size-node$node.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p" || { echo "bench_two_hosts.sh: $mode all_reduce of $size bytes failed:" >&2; cat "$out"/$mode-$size-node*.log >&2; exit 1; }
    done
    bytes=$(( $(crossed) - before ))
    IFS=, read -r transport ranks _ iters median _ <"$out/$mode-$size.csv"
    # Every all_reduce of this size the worker ran: 2 checks, the warm-up, the timed calls.
    warm=$(( iters / 10 > 3 ? iters / 10 : 3 ))
    per_call=$(( bytes / (2 + warm + iters) ))
    [[ $mode == flat ]] && flat_bytes=$per_call
    ratio=$(awk -v x="$per_call" -v y="$flat_bytes" 'BEGIN { printf "%.2f", (y > 0 ? x / y : 1) }')
    human=$(awk -v b="$size" 'BEGIN { if (b >= 1048576) printf "%d MiB", b / 1048576; else printf "%d KiB", b / 1024 }')
    printf "| %s | %s | %s | %.1f ms | %.1f MiB | %s× |\n" "$human" "$mode" "$transport" \
      "$(awk -v m="$median" 'BEGIN { print m / 1000 }')" "$(awk -v b="$per_call" 'BEGIN { print b / 1048576 }')" "$ratio"
  done
done
