#!/usr/bin/env python3
"""PyTorch baselines for bench/gpu/run.sh, on the shapes of ctxpar_gpu_bench.

GQA decode: torch.nn.functional.scaled_dot_product_attention with enable_gqa=True
(q [B, 32, 1, 128], k/v [B, 8, L, 128], bf16). Absorbed-MLA decode: einsum, softmax in fp32,
einsum (q [B, H, 576], kv [B, L, 576], V = kv[..., :512], bf16). Median of CUDA-event timings
after warm-up, each the mean of CALLS back-to-back calls; random inputs (never zeros).
"""
import argparse
import json
import math
import sys

# CALLS back-to-back calls between one pair of events, as ctxpar_gpu_bench does: with one call per
# pair the GPU idles while Python dispatches, and every timing would include that latency.
WARMUP, REPS, CALLS = 5, 20, 10
CASES = [
    ("gqa", 1, 131072, 32), ("gqa", 16, 8192, 32), ("gqa", 64, 4096, 32),
    ("mla", 1, 131072, 16), ("mla", 32, 8192, 16), ("mla", 64, 4096, 16),
    ("mla", 1, 131072, 128), ("mla", 32, 8192, 128), ("mla", 64, 4096, 128),
]


def median_ms(torch, fn):
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(CALLS):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / CALLS)
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    result = {"cases": []}
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        result["error"] = f"torch not importable: {e}"
        print(result["error"], file=sys.stderr)
        if args.json:
            json.dump(result, open(args.json, "w"), indent=1)
        return 1
    result["torch"] = torch.__version__
    gen = torch.Generator(device="cuda").manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    for kind, batch, context, heads in CASES:
        if kind == "gqa":
            q = torch.randn(batch, heads, 1, 128, device=dev, dtype=bf16, generator=gen)
            k = torch.randn(batch, 8, context, 128, device=dev, dtype=bf16, generator=gen)
            v = torch.randn(batch, 8, context, 128, device=dev, dtype=bf16, generator=gen)
            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        else:
            q = torch.randn(batch, heads, 576, device=dev, dtype=bf16, generator=gen)
            kv = torch.randn(batch, context, 576, device=dev, dtype=bf16, generator=gen)
            scale = 1.0 / math.sqrt(576)

            def fn(q=q, kv=kv, scale=scale):
                s = torch.einsum("bhd,bld->bhl", q, kv) * scale
                p = torch.softmax(s.float(), dim=-1).to(bf16)
                return torch.einsum("bhl,bld->bhd", p, kv[..., :512])
        ms = median_ms(torch, fn)
        result["cases"].append(
            {"kind": kind, "batch": batch, "context": context, "q_heads": heads, "ms": ms})
        print(f"torch {kind} B={batch} L={context} Hq={heads}: {ms:.4f} ms", flush=True)
        del fn
        torch.cuda.empty_cache()
    if args.json:
        json.dump(result, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
