#!/usr/bin/env bash
# Decode tokens/s of `ctxpar generate` with and without --speculative-algorithm NGRAM, at batch
# 1, greedy, in the same run: a repetitive ledger, a code edit that quotes its source, and a chat
# request that repeats nothing, at tp 1 (2 threads) and tp 3 / dcp 3 a2a (1 thread a rank). Each
# figure is the median of REPEATS processes, each timed after a warm-up run (--warmup 1). The
# accept length is the tokens a verify step gave (the step log's last decode line). Prints a
# markdown table.
#
#   bash bench/model/bench_speculative.sh   # env: CTXPAR_MODEL, CTXPAR_BIN, REPEATS (3),
#                                           #      NEW_TOKENS (128), RANKS3 (1; 0 skips tp 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${CTXPAR_MODEL:-$(bash scripts/fetch-model.sh)}"
bin="${CTXPAR_BIN:-build/default/cli/ctxpar}"
repeats="${REPEATS:-3}"
new_tokens="${NEW_TOKENS:-128}"
ranks3="${RANKS3:-1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

ledger=$'Deliveries ledger, March 2024
2024-03-01 | Warehouse A | 12 crates of apples | received by J. Smith | status: complete
2024-03-02 | Warehouse B | 8 crates of pears | received by J. Smith | status: complete
2024-03-03 | Warehouse A | 15 crates of apples | received by M. Jones | status: complete
2024-03-04 | Warehouse C | 6 crates of plums | received by J. Smith | status: complete
2024-03-05 |'
code=$'Rename the function `add` to `plus` and keep everything else.

def add(a, b):
    """Return the sum of a and b."""
    result = a + b
    return result


def add_all(values):
    """Return the sum of the values."""
    total = 0
    for v in values:
        total = add(total, v)
    return total

Answer:
'
chat="Write a short story about a lighthouse keeper who finds a message in a bottle."

# run ARGS...: "decode_tokens_per_s accept_len" medians of REPEATS runs.
run() {
  local ds="" as=""
  for _ in $(seq "$repeats"); do
    out=$("$bin" generate --warmup 1 --ignore-eos --max-new-tokens "$new_tokens" \
            --model-path "$model" "$@" 2>&1 >/dev/null)
    d=$(grep 'tokens/s' <<<"$out" | tail -1 |
          sed -E 's/.*decode [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/')
    a=$(grep -o 'accept len [0-9.]*' <<<"$out" | tail -1 | awk '{print $3}' || true)
    ds+="$d,"
    as+="${a:-1},"
  done
  python3 -c "import statistics as s; print(s.median([$ds]), s.median([$as]))"
}

echo "| prompt | layout | plain tok/s | NGRAM tok/s | accept len | speedup |"
echo "|---|---|---|---|---|---|"
layouts=("tp 1, 2 threads|--threads 2")
[ "$ranks3" != 0 ] && layouts+=("tp 3 / dcp 3 a2a|--threads 1 --tp-size 3 --dcp-size 3 --dcp-comm-backend a2a")
for name in ledger code chat; do
  prompt="${!name}"
  extra=()
  [ "$name" = chat ] && extra=(--chat)
  for layout in "${layouts[@]}"; do
    label="${layout%%|*}"
    read -r -a flags <<<"${layout#*|}"
    read -r plain _ < <(run "${flags[@]}" "${extra[@]}" "$prompt")
    read -r spec accept < <(run "${flags[@]}" "${extra[@]}" --speculative-algorithm NGRAM "$prompt")
    speedup=$(python3 -c "print(f'{$spec / $plain:.2f}x')")
    echo "| $name | $label | $plain | $spec | $accept | $speedup |"
  done
done
