#!/usr/bin/env python3
"""Decode at batch 1 beside the read ceiling of the same run (issue 36's 80 % target).

Each round measures the read ceiling (`ctxpar bench attention`: what one thread per core
streams from DRAM), then runs `ctxpar generate` of bench_generate.sh's prompt (--warmup 1
--ignore-eos) with each binary given, in turn; the ceiling is measured once more at the end.
The binaries' order is reversed every other round: on the Zen 4 host the binary run second in
a round was the faster in 13 of 16 rounds (docs/perf-model.md), so an even count of rounds
gives each order the same weight.
The bytes a decode step must read are counted from the file, not from ctxpar's packs: every
tensor but the token embedding (one row a token; it counts when it is also the output
projection), and the KV cache at each step's context (the model's KV heads and dims, the
sliding-window layers up to their window, the element size `ctxpar check` reports). Prints each
run, then per binary the median tokens/s and its GB/s and share of the median ceiling, and for
each binary after the first the median of the rounds' ratios to the first (the host moves both
binaries of a round together, so the ratio spreads less than either rate).

Usage: $(bash scripts/install-python.sh) bench/model/decode_ceiling.py --model FILE
           [--ctxpar BIN ...] [--cores 0,1] [--rounds 4] [--new-tokens 128]
           [--flags "--dtype auto"] [--prompt-chars 2600]
(the project's venv has gguf-py, which reads the file).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

try:
    import gguf  # gguf-py, llama.cpp's GGUF library (PyPI: gguf)
except ImportError:
    sys.exit("needs gguf-py: run it with the python that scripts/install-python.sh prints")

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT_UNIT = (
    "Decode context parallelism shards the KV cache of each sequence across the ranks of a "
    "group. Every rank attends over its own shard and the partial results are merged with "
    "their log-sum-exp, so the output is exact whatever the number of ranks. "
    "The prefill writes each token's keys and values to the rank that owns its position; "
    "during decode every rank reads only what it owns, which divides the memory traffic. ")


def read_gguf(path):
    """(metadata dict, {tensor name: bytes in the file}) of a GGUF file, through gguf-py."""
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError) as e:
        sys.exit(f"{path}: cannot read it as GGUF: {e}")
    meta = {key: field.contents() for key, field in reader.fields.items()}
    return meta, {t.name: int(t.n_bytes) for t in reader.tensors}


def run(cmd, cores):
    out = subprocess.run(["taskset", "-c", cores] + cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def ceiling(ctxpar, cores, threads):
    text = run([ctxpar, "bench", "attention", "--kinds", "smollm2-bf16", "--contexts", "1k",
                "--threads", str(threads)], cores)
    found = re.findall(r"read ceiling ([0-9.]+) GB/s", text)
    if not found:
        sys.exit("ctxpar bench attention printed no read ceiling")
    return float(found[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    built = os.path.join(HERE, "..", "..", "build", "default", "cli", "ctxpar")
    ap.add_argument("--ctxpar", nargs="+", default=[os.path.normpath(built)],
                    help="binaries to alternate (default: this checkout's build)")
    ap.add_argument("--cores", default="0,1", help="taskset's list; one thread per core")
    ap.add_argument("--rounds", type=int, default=4,
                    help="rounds; the order of the binaries flips every other one")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-chars", type=int, default=2600,
                    help="the prompt's length in characters (2600: about 530 tokens)")
    ap.add_argument("--flags", default="--dtype auto", help="extra flags for ctxpar generate")
    args = ap.parse_args()
    if args.prompt_chars < 1:
        sys.exit("--prompt-chars must be at least 1")
    threads = len(args.cores.split(","))
    flags = args.flags.split()

    meta, sizes = read_gguf(args.model)

    def need(key):
        if key not in meta:
            sys.exit(f"{args.model}: no {key} in its metadata")
        return meta[key]

    arch = need("general.architecture")
    tied = "output.weight" not in sizes
    weights = sum(b for n, b in sizes.items() if n != "token_embd.weight" or tied)
    layers = need(f"{arch}.block_count")
    heads = need(f"{arch}.attention.head_count")
    kv_heads = meta.get(f"{arch}.attention.head_count_kv", heads)
    if isinstance(kv_heads, list):
        sys.exit("per-layer KV head counts are not counted by this script")
    head_dim = meta.get(f"{arch}.attention.key_length")
    head_dim = head_dim or need(f"{arch}.embedding_length") // heads
    value_dim = meta.get(f"{arch}.attention.value_length", head_dim)

    check = run([args.ctxpar[0], "check", "--model-path", args.model] + flags, args.cores)
    elem = re.search(r"K/V in (\w+)", check)
    elem_bytes = {"f32": 4, "bf16": 2, "f16": 2, "f8_e4m3": 1, "f8_e5m2": 1}
    if elem is None or elem.group(1) not in elem_bytes:
        sys.exit("ctxpar check did not say the KV cache's element type")
    kv_token_layer = kv_heads * (head_dim + value_dim) * elem_bytes[elem.group(1)]
    swa = re.search(r"sliding-window KV pool of (\d+) layers with a window of (\d+)", check)
    swa_layers, window = (int(swa.group(1)), int(swa.group(2))) if swa else (0, 0)

    prompt = (PROMPT_UNIT * (args.prompt_chars // len(PROMPT_UNIT) + 1))[:args.prompt_chars]
    print(f"{os.path.basename(args.model)}: {arch}, {weights / 1e6:.1f} MB of weights a token "
          f"(embedding {'counted: tied output' if tied else 'not counted'}), KV "
          f"{kv_token_layer} B a token per layer over {layers} layers ({swa_layers} of them up "
          f"to a window of {window}); cores {args.cores}; {' '.join(flags)}")
    rates = {b: [] for b in args.ctxpar}
    gbs = {b: [] for b in args.ctxpar}
    ceilings = []
    for r in range(args.rounds):
        ceilings.append(ceiling(args.ctxpar[0], args.cores, threads))
        print(f"read ceiling {ceilings[-1]:.1f} GB/s")
        for b in args.ctxpar if r % 2 == 0 else args.ctxpar[::-1]:
            text = run([b, "generate", "--warmup", "1", "--ignore-eos", "--max-new-tokens",
                        str(args.new_tokens), "--threads", str(threads), "--model-path",
                        args.model] + flags + [prompt], args.cores)
            m = re.search(r"prefill (\d+) tokens .*?decode (\d+) tokens in [0-9.]+ s "
                          r"\(([0-9.]+) tokens/s\)", text)
            if m is None:
                sys.exit(f"{b} generate printed no decode rate:\n{text[-2000:]}")
            prompt_tokens, steps, rate = int(m.group(1)), int(m.group(2)), float(m.group(3))
            # Decode step i (1-based) attends over the prompt, the first token and i earlier ones.
            kv = 0
            for i in range(1, steps + 1):
                ctx = prompt_tokens + i
                kv += kv_token_layer * ((layers - swa_layers) * ctx +
                                        swa_layers * min(ctx, window or ctx))
            step_bytes = weights + kv / max(steps, 1)
            rates[b].append(rate)
            gbs[b].append(rate * step_bytes / 1e9)
            print(f"round {r + 1} {b}: {rate:.1f} tokens/s, {step_bytes / 1e6:.1f} MB a token, "
                  f"{gbs[b][-1]:.1f} GB/s")
    ceilings.append(ceiling(args.ctxpar[0], args.cores, threads))
    print(f"read ceiling {ceilings[-1]:.1f} GB/s")
    ceil = statistics.median(ceilings)
    for b in args.ctxpar:
        g = statistics.median(gbs[b])
        print(f"{b}: median {statistics.median(rates[b]):.1f} tokens/s, {g:.1f} GB/s, "
              f"{100 * g / ceil:.0f} % of the read ceiling ({ceil:.1f} GB/s, the median of "
              f"{', '.join(f'{c:.1f}' for c in ceilings)})")
    first = args.ctxpar[0]
    for b in args.ctxpar[1:]:
        ratios = [x / y for x, y in zip(rates[b], rates[first])]
        print(f"{b} / {first}: median of the rounds' ratios {statistics.median(ratios):.3f} "
              f"({' '.join(f'{x:.3f}' for x in ratios)})")


if __name__ == "__main__":
    main()
