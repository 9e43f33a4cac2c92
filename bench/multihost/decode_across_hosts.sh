#!/usr/bin/env bash
# Decode across two network-namespace hosts (scripts/netns-cluster.sh) beside one host over TCP
# alone, in one run, alternating: SmolLM2, tp 3 / dcp 3 (a2a), greedy, --warmup 1. Prints each
# run's decode tokens/s and the medians with their ratio (the target: across >= 0.8 x one host).
# With LINKS="rate 100mbit;rate 10mbit;..." (netns-cluster.sh link settings: rate, or netem
# ARGS where the kernel has netem) it also runs across hosts with each setting on every host's
# link, and prints the decode step measured beside the one `ctxpar plan` predicts for that link
# (below), and the a2a combine over the link (`bench combine`).
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

# What `ctxpar plan` predicts for a link: the decode step on one rank per host whose network has
# the link's rate and a per-collective latency fitted to the a2a combine just measured over it
# (its time less its bytes at that rate), as an increment over the unshaped network (plan's
# step with a 1 TB/s network and no latency), added to the step measured unshaped.
plan_step() {  # RATE_BYTES_PER_S LATENCY_US -> plan's decode step in ms
  printf '{"memory_gib": 24, "mem_gbps": 20, "flops": 1e11, "host_ranks": 1, "net_gbps": %s,
    "net_latency_us": %s}' "$(awk -v r="$1" 'BEGIN {print r / 1e9}')" "$2" >"$state_json"
  "$bin" plan --model-path "$model" --hardware-json "$state_json" --tp-size 3 --dcp-size 3 \
    --dcp-comm-backend a2a --no-dcp-replicate-q-proj --input-len 8 --output-len 64 \
    --concurrency 1 --json | python3 -c 'import json, sys
print(json.load(sys.stdin)["candidates"][0]["decode_step_ms"])'
}
state_json=$(mktemp)
base_ms=$(awk -v t="$m2" 'BEGIN {print 1000 / t}')
free_ms=$(plan_step 1e12 0)

IFS=';' read -r -a links <<<"${LINKS:-}"
for link in "${links[@]}"; do
  for h in $hosts; do bash $cluster link "$h" $link; done
  r=""
  for i in $(seq 1 "$repeats"); do r="$r $(rate "$across")"; done
  # The combine alone over two hosts, one rank each (it takes 2, 4 or 8 ranks): the a2a of
  # SmolLM2's shape is not among its shapes, so its gqa one gives the link's latency.
  read -r a2a_us a2a_bytes < <(mpirun --quiet $across --map-by node -np 2 "$bin" bench combine \
    --json --batch 1 --seconds 0.5 2>/dev/null | python3 -c 'import json, sys
x = [x for x in json.load(sys.stdin)["results"] if x["shape"] == "gqa" and x["backend"] == "a2a"]
print(x[0]["us_per_layer"], x[0]["bytes_sent_per_rank"])')
  bytes_per_s=$(echo "$link" | awk '$1 == "rate" {v = $2; m = 1; if (v ~ /gbit$/) m = 1e9;
    else if (v ~ /mbit$/) m = 1e6; else if (v ~ /kbit$/) m = 1e3; sub(/[a-z]+$/, "", v);
    print v * m / 8}')
  measured_ms=$(awk -v t="$(echo "$r" | median)" 'BEGIN {print 1000 / t}')
  if [ -n "$bytes_per_s" ]; then
    latency_us=$(awk -v t="$a2a_us" -v b="$a2a_bytes" -v r="$bytes_per_s" \
      'BEGIN {l = t - b / r * 1e6; print (l > 0 ? l : 0)}')
    predicted_ms=$(awk -v base="$base_ms" -v p="$(plan_step "$bytes_per_s" "$latency_us")" \
      -v f="$free_ms" 'BEGIN {print base + p - f}')
  else
    latency_us="-" predicted_ms="- (netem: no rate to give plan)"
  fi
  printf "link '%s': decode step %.1f ms measured (runs:%s tokens/s), %s ms predicted;" \
    "$link" "$measured_ms" "$r" "$predicted_ms"
  printf " a2a combine %.0f us/layer for %s bytes (latency fitted: %s us)\n" "$a2a_us" \
    "$a2a_bytes" "$latency_us"
  for h in $hosts; do bash $cluster link "$h" clear; done
done
rm -f "$state_json"
