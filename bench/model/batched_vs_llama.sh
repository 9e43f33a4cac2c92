#!/usr/bin/env bash
# Batched decode beside llama.cpp's llama-batched-bench, same GGUF, same run: 1, 4 and 16
# sequences of about 500 tokens of context each, decoding 64 tokens together; total decode
# tokens/s of all sequences. ctxpar: `ctxpar generate --prompts-file` with every request
# submitted at once (its "decode ... tokens/s" line counts the steps after every request has its
# first token); llama.cpp: S_TG of llama-batched-bench (-npp 500 -ntg 64 -npl B). Both on the
# same threads, alternating per batch size, median of REPEATS each. llama.cpp runs at its own
# defaults (its OpenMP threads spin at barriers, OMP_WAIT_POLICY unset: what its users get) and
# again with OMP_WAIT_POLICY=PASSIVE (which a host shared with other work favours, and which on a
# quiet host halves its rate at one sequence); the ratio is against its defaults. Prints a
# markdown table.
#
#   bash bench/model/batched_vs_llama.sh   # env: CTXPAR_MODEL, CTXPAR_BIN, LLAMA_BIN (the bin
#                                          #      directory, default: bench/llama_cpp/build.sh's),
#                                          #      THREADS (cores), REPEATS (3), BATCHES ("1 4 16"),
#                                          #      FLAGS (more generate flags)
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${CTXPAR_MODEL:-$HOME/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
bin="${CTXPAR_BIN:-build/default/cli/ctxpar}"
llama="${LLAMA_BIN:-$(bash bench/llama_cpp/build.sh | tail -n 1)}"
threads="${THREADS:-$(nproc)}"
repeats="${REPEATS:-3}"
batches="${BATCHES:-1 4 16}"
read -r -a flags <<<"${FLAGS:-}"
unset OMP_WAIT_POLICY
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# About 500 tokens of text per request, different per request.
python3 - "$dir" <<'PY'
import sys
t = ("Decode context parallelism shards the KV cache of each sequence across the ranks of a "
     "group. Every rank attends over its own shard and the partial results are merged with "
     "their log-sum-exp, so the output is exact whatever the number of ranks. ")
for n in (1, 4, 16):
    with open(f"{sys.argv[1]}/prompts{n}.txt", "w") as f:
        for i in range(n):
            f.write(f"Request {i}: " + (t * 12)[:2300] + "\n")
PY
median() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
llama_tg() {  # S_TG of the row of B = $1: | PP | TG | B | N_KV | T_PP | S_PP | T_TG | S_TG | T | S |
  row=$("$llama/llama-batched-bench" -m "$model" -c $(($1 * 600 + 64)) -b 2048 -ub 512 \
          -npp 500 -ntg 64 -npl "$1" -t "$threads" 2>/dev/null | grep -E '^\|\s+500 \|')
  awk -F'|' '{gsub(/ /, "", $9); print $9}' <<<"$row"
}
echo "| sequences | ctxpar decode tok/s | llama-batched-bench S_TG tok/s | ratio | llama.cpp, OMP_WAIT_POLICY=PASSIVE | load avg |"
echo "|---|---|---|---|---|---|"
for n in $batches; do
  ours=() theirs=() passive=()
  for _ in $(seq "$repeats"); do
    line=$("$bin" generate --model-path "$model" --threads "$threads" --ignore-eos \
             --max-new-tokens 64 --prompts-file "$dir/prompts$n.txt" "${flags[@]}" \
             2>&1 >/dev/null | grep 'tokens/s' | tail -1)
    ours+=("$(sed -E 's/.*decode [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/' <<<"$line")")
    theirs+=("$(llama_tg "$n")")
    passive+=("$(OMP_WAIT_POLICY=PASSIVE llama_tg "$n")")
  done
  o=$(median "${ours[@]}")
  l=$(median "${theirs[@]}")
  p=$(median "${passive[@]}")
  echo "| $n | $o | $l | $(python3 -c "print(f'{$o / $l:.2f}')") | $p | $(cut -d' ' -f1 /proc/loadavg) |"
done
