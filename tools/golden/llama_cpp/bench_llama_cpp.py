#!/usr/bin/env python3
"""llama.cpp's speed on a GGUF, to print beside ctxpar's in the same run: prefill tokens/s on a
prompt of 512 tokens and decode tokens/s over 128 greedy new tokens, with 1 and 2 threads.

Prints one JSON object. Each figure is the best of --repeats runs after one warm-up run (the
machine is shared; the best run is the one least disturbed).

    /root/.cache/ctxpar/venv/bin/python tools/golden/llama_cpp/bench_llama_cpp.py \\
        "$(bash scripts/fetch-model.sh)" [--threads 1 2] [--prompt-tokens 512] [--new-tokens 128]
(venv as in make_tokenizer_golden.py)
"""
import argparse
import json
import os
import pathlib
import sys
import time

import llama_cpp
import numpy as np

from versions import llama_cpp_versions

# Varied English, repeated until the prompt has enough tokens, then cut to exactly that many.
TEXT = (
    "Decode context parallelism shards the KV cache of each sequence across the ranks of a "
    "group. Every rank attends over its own shard and the partial results are merged with "
    "their log-sum-exp, so the output is exact whatever the number of ranks. "
    "The prefill writes each token's keys and values to the rank that owns its position; "
    "during decode every rank reads only what it owns, which divides the memory traffic. "
)


def measure(model_path: str, threads: int, prompt_tokens: int, new_tokens: int,
            repeats: int) -> dict:
    llm = llama_cpp.Llama(model_path, n_ctx=prompt_tokens + new_tokens + 8, n_batch=prompt_tokens,
                          n_ubatch=prompt_tokens, n_threads=threads, n_threads_batch=threads,
                          logits_all=False, verbose=False)
    ids = []
    while len(ids) < prompt_tokens:
        ids = llm.tokenize((TEXT * (len(ids) // 40 + 2)).encode(), add_bos=False)
    ids = ids[:prompt_tokens]
    best_prefill = 0.0
    best_decode = 0.0
    for run in range(repeats + 1):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t1 = time.perf_counter()
        for _ in range(new_tokens):
            # Without logits_all the bindings keep no scores: read the last row through the C API.
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(llm.n_vocab(),))
            llm.eval([int(np.argmax(logits))])
        t2 = time.perf_counter()
        if run == 0:
            continue  # warm-up: page faults of the mapping, thread pool start
        best_prefill = max(best_prefill, prompt_tokens / (t1 - t0))
        best_decode = max(best_decode, new_tokens / (t2 - t1))
    return {"threads": threads, "prefill_tokens_per_s": round(best_prefill, 1),
            "decode_tokens_per_s": round(best_decode, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.prompt_tokens < 1 or args.new_tokens < 1 or args.repeats < 1:
        sys.exit("bench_llama_cpp: --prompt-tokens, --new-tokens and --repeats must be >= 1")
    # ggml's threads spin at barriers, so 2 threads on 2 busy cores measure the other load more
    # than llama.cpp: the load average says how busy the machine was.
    load_before = os.getloadavg()[0]
    results = [measure(args.model, t, args.prompt_tokens, args.new_tokens, args.repeats)
               for t in args.threads]
    json.dump({
        "engine": "llama.cpp",
        "model": pathlib.Path(args.model).name,
        "reference": llama_cpp_versions(),
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "decode": "greedy (argmax of the last logits), one token per eval",
        "cpus_available": len(os.sched_getaffinity(0)),
        "load_average_1min": {"before": round(load_before, 2),
                              "after": round(os.getloadavg()[0], 2)},
        "results": results,
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
