#!/usr/bin/env bash
# Decode across two network-namespace hosts (scripts/netns-cluster.sh) beside one host over TCP
# alone, in one run, alternating: SmolLM2, tp 3 / dcp 3 (a2a), greedy, --warmup 1. Prints each
# run's decode tokens/s and the medians with their ratio (the target: across >= 0.8 x one host).
# With LINKS="delay 100us;delay 1ms rate 1gbit;..." it also runs across hosts with each `tc
# netem` setting on every host's link, and prints `bench combine` across the hosts beside it.
#
#   sudo bash bench/multihost/decode_across_hosts.sh     # env: CTXPAR (the binary), CTXPAR_MODEL,
#                                                        #      REPEATS (3), TOKENS (128), SLOTS
#                                                        #      ("2 1": ranks per host), LINKS
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${CTXPAR:-build/default/cli/ctxpar}"
model="${CTXPAR_MODEL:-$(bash scripts/fetch-model.sh)}"
repeats="${REPEATS:-3}"
tokens="${TOKENS:-128}"
read -r -a slots <<<"${SLOTS:-2 1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cluster=scripts/netns-cluster.sh
trap 'bash $cluster down' EXIT
across=$(bash $cluster up "${#slots[@]}" "${slots[@]}")
hosts=$(seq -f "ctxpar-h%g" 1 "${#slots[@]}")

rate() {  # decode tokens/s of one generate run with CTXPAR_MPIRUN_ARGS="$1"
  CTXPAR_MPIRUN_ARGS="$1" "$bin" generate --model-path "$model" --tp-size 3 --dcp-size 3 \
    --dcp-comm-backend a2a --max-new-tokens "$tokens" --ignore-eos --warmup 1 \
    "Write a long story about a lighthouse keeper." 2>&1 >/dev/null |
    sed -n 's/.*decode [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p'
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "hosts: ${slots[*]} ranks"
one="" two=""
for i in $(seq 1 "$repeats"); do
  a=$(rate "--mca btl tcp,self")
  b=$(rate "$across")
  echo "run $i: one host (TCP only) $a tokens/s, across hosts $b tokens/s"
  one="$one $a" two="$two $b"
done
m1=$(echo "$one" | median) m2=$(echo "$two" | median)
echo "median: one host $m1, across hosts $m2 tokens/s: $(awk -v a="$m2" -v b="$m1" \
  'BEGIN {printf "%.2f", a / b}') x"

IFS=';' read -r -a links <<<"${LINKS:-}"
for link in "${links[@]}"; do
  for h in $hosts; do bash $cluster link "$h" netem $link; done
  r=""
  for i in $(seq 1 "$repeats"); do r="$r $(rate "$across")"; done
  # The combine alone, one rank per host.
  combine=$(mpirun --quiet $across --map-by node -np "${#slots[@]}" "$bin" bench \
    combine --json --batch 1 --seconds 0.5 2>/dev/null |
    python3 -c 'import json,sys; [print(f"{x[\"backend\"]} {x[\"shape\"]} {x[\"us_per_layer\"]:.0f} us/layer") for x in json.load(sys.stdin)["results"] if x["shape"] == "gqa"]' |
    tr '\n' ';')
  echo "link '$link': decode median $(echo "$r" | median) tokens/s (runs:$r); combine: $combine"
  for h in $hosts; do bash $cluster link "$h" clear; done
done
