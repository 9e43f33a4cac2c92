#!/usr/bin/env bash
# Prefill and decode tokens/s of `ctxpar generate` on 1 and 2 cores, beside llama.cpp's
# llama-bench (bench/llama_cpp/build.sh builds it) on the same GGUF in the same run: pp512 (a
# 512-token prompt) and tg128 at depth 512 (128 tokens decoded after a 512-token context, as
# ctxpar decodes after its ~550-token prompt). Each figure is the median of REPEATS runs: ctxpar
# processes, each timed after a warm-up run (--warmup 1), and llama-bench's repetitions, which
# follow its own warm-up run. Prints a markdown table.
#
#   bash bench/model/bench_generate.sh            # env: CTXPAR_MODEL, CTXPAR_BIN, LLAMA_CPP_BIN
#                                                 #      (a directory), REPEATS (3), NEW_TOKENS (128),
#                                                 #      RANKS3 (1; 0 skips the tp 3 dcp 3 rows),
#                                                 #      NUMERICS (1; 0 skips --llama-cpp-numerics),
#                                                 #      AUTO (1; 0 skips --dtype auto)
#   CTXPAR_MODEL=$(bash scripts/fetch-model.sh gemma3) RANKS3=0 NUMERICS=0 \
#       bash bench/model/bench_generate.sh         # Gemma 3 (4 heads; int8 activations refused)
#
# On a machine shared with other jobs, `chrt -f 10 env RANKS3=0 bash bench/model/bench_generate.sh`
# gives both engines their cores for the run; the three-rank rows must stay out of it, since
# three spinning MPI ranks at a real-time priority on two cores never yield to each other.
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${CTXPAR_MODEL:-$(bash scripts/fetch-model.sh)}"
bin="${CTXPAR_BIN:-build/default/cli/ctxpar}"
llama_bin="${LLAMA_CPP_BIN:-$(bash bench/llama_cpp/build.sh | tail -1)}"
repeats="${REPEATS:-3}"
new_tokens="${NEW_TOKENS:-128}"
ranks3="${RANKS3:-1}"
numerics="${NUMERICS:-1}"
auto="${AUTO:-1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# About 550 tokens of text (llama-bench times random tokens of the requested counts instead).
prompt=$(python3 -c '
t = ("Decode context parallelism shards the KV cache of each sequence across the ranks of a "
     "group. Every rank attends over its own shard and the partial results are merged with "
     "their log-sum-exp, so the output is exact whatever the number of ranks. "
     "The prefill writes each token\x27s keys and values to the rank that owns its position; "
     "during decode every rank reads only what it owns, which divides the memory traffic. ")
print((t * 8)[:2600])')

# median_of CORES ARGS...: the median prefill and decode tokens/s of REPEATS runs,
# "prefill decode n".
median_of() {
  local cores=$1
  shift
  local ps="" ds="" n=0
  for _ in $(seq "$repeats"); do
    # --warmup 1: timed after a warm-up run, as llama-bench times its runs.
    line=$(taskset -c "$cores" "$bin" generate --warmup 1 --ignore-eos --max-new-tokens "$new_tokens" \
             --model-path "$model" "$@" "$prompt" 2>&1 >/dev/null | grep 'tokens/s' | tail -1)
    # "prefill N tokens (M from the prefix cache) in T s (R tokens/s)"
    p=$(sed -E 's/.*prefill [0-9]+ tokens( \([^)]*\))? in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\2/' \
          <<<"$line")
    n=$(sed -E 's/.*prefill ([0-9]+) tokens.*/\1/' <<<"$line")
    d=$(sed -E 's/.*decode [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) tokens\/s\).*/\1/' <<<"$line")
    ps+="$p,"
    ds+="$d,"
  done
  python3 -c "import statistics as s; print(s.median([$ps]), s.median([$ds]), $n)"
}

echo "| engine | cores | ranks | prompt tokens | prefill tokens/s | decode tokens/s |"
echo "|---|---|---|---|---|---|"
for cores in 0 0,1; do
  ncores=$(tr ',' '\n' <<<"$cores" | wc -l)
  read -r p d n < <(median_of "$cores" --threads "$ncores")
  echo "| ctxpar (fp32 activations) | $ncores | 1 | $n | $p | $d |"
  if [ "$auto" != 0 ]; then
    read -r p d n < <(median_of "$cores" --threads "$ncores" --dtype auto)
    echo "| ctxpar --dtype auto (int8, matrix units) | $ncores | 1 | $n | $p | $d |"
  fi
  if [ "$numerics" != 0 ]; then
    read -r p d n < <(median_of "$cores" --threads "$ncores" --llama-cpp-numerics)
    echo "| ctxpar --llama-cpp-numerics | $ncores | 1 | $n | $p | $d |"
  fi
  if [ "$ranks3" != 0 ]; then
    read -r p d n < <(median_of "$cores" --threads 1 --tp-size 3 --dcp-size 3 \
                      --dcp-comm-backend a2a --dcp-replicate-q-proj)
    echo "| ctxpar tp 3 dcp 3 a2a, replicated Q | $ncores | 3 | $n | $p | $d |"
  fi
  for args in "-p 512 -n 0 -d 0" "-p 0 -n $new_tokens -d 512"; do
    # shellcheck disable=SC2086
    taskset -c "$cores" "$llama_bin/llama-bench" -m "$model" -t "$ncores" -r "$repeats" $args \
      -o json 2>/dev/null
  done | python3 -c '
import json, statistics, sys
text, results = sys.stdin.read(), []
while text.strip():  # one JSON array per llama-bench run
    part, end = json.JSONDecoder().raw_decode(text.strip())
    results += part
    text = text.strip()[end:]
pp = tg = build = "-"
for r in results:
    median = statistics.median(r["samples_ts"])
    if r["n_gen"] == 0:
        pp = f"{median:.1f}"
    else:
        tg = f"{median:.1f}"
    build = r["build_commit"]
print(f"| llama.cpp llama-bench ({build}) | '"$ncores"' | 1 | 512 | {pp} | {tg} |")'
done
