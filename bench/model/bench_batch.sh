#!/usr/bin/env bash
# The engine's batched decode: 1, 4 and 16 requests of about 500 tokens each decoding together
# (`ctxpar generate --prompts-file`, every request submitted at once), decode tokens/s of all
# rows together after every request has its first token, on 1 and 2 cores; the ratio to the
# single request's rate is what batching buys (one step reads the weights once for all rows).
# Each figure is the best of REPEATS runs (the machine may be shared). Prints a markdown table.
#
#   bash bench/model/bench_batch.sh       # env: CTXPAR_MODEL, CTXPAR_BIN, REPEATS (3),
#                                         #      NEW_TOKENS (64), BATCHES ("1 4 16"),
#                                         #      FLAGS (more generate flags, e.g.
#                                         #      "--kv-cache-dtype bf16")
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${CTXPAR_MODEL:-$(bash scripts/fetch-model.sh)}"
bin="${CTXPAR_BIN:-build/default/cli/ctxpar}"
repeats="${REPEATS:-3}"
new_tokens="${NEW_TOKENS:-64}"
batches="${BATCHES:-1 4 16}"
read -r -a flags <<<"${FLAGS:-}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Request i: about 500 tokens of text that differ per request (so no two rows are the same).
python3 - "$dir" <<'PY'
import sys
t = ("Decode context parallelism shards the KV cache of each sequence across the ranks of a "
     "group. Every rank attends over its own shard and the partial results are merged with "
     "their log-sum-exp, so the output is exact whatever the number of ranks. ")
for n in (1, 4, 16, 64):
    with open(f"{sys.argv[1]}/prompts{n}.txt", "w") as f:
        for i in range(n):
            f.write(f"Request {i}: " + (t * 12)[:2300] + "\n")
PY

echo "| cores | requests | prompt tokens | prefill tokens/s | decode tokens/s (all rows) | x 1 request |"
echo "|---|---|---|---|---|---|"
for cores in 0 0,1; do
  ncores=$(tr ',' '\n' <<<"$cores" | wc -l)
  base=0
  for n in $batches; do
    best_p=0 best_d=0 tokens=0
    for _ in $(seq "$repeats"); do
      line=$(taskset -c "$cores" "$bin" generate --model-path "$model" --threads "$ncores" \
               --ignore-eos --max-new-tokens "$new_tokens" --prompts-file "$dir/prompts$n.txt" "${flags[@]}" \
               2>&1 >/dev/null | grep 'tokens/s' | tail -1)
      p=$(sed -E \
            's/.*prefill [0-9]+ tokens( \([^)]*\))? in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\2/' \
            <<<"$line")
      tokens=$(sed -E 's/.*prefill ([0-9]+) tokens.*/\1/' <<<"$line")
      d=$(sed -E 's/.*decode [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/' <<<"$line")
      best_p=$(python3 -c "print(max($best_p, $p))")
      best_d=$(python3 -c "print(max($best_d, $d))")
    done
    [ "$n" = 1 ] && base=$best_d
    ratio=$(python3 -c "print(f'{$best_d / $base:.2f}' if $base > 0 else '-')")
    echo "| $ncores | $n | $tokens | $best_p | $best_d | $ratio |"
  done
done
