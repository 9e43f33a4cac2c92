"""This machine for `ctxpar plan --hardware-json`: the rates the step-time model needs, measured
by ctxpar's own benchmarks in one run (docs/plan.md):

  mem_gbps   weight bytes per second of the matmuls of a batch-1 decode step (bench matmul, rows 1)
  flops      FLOP/s of the same matmuls with 512 rows (bench matmul, rows 512: prefill)
  flops_small  the same with 16 rows (steps of fewer than 64 tokens: decode)
  flops_curve  [rows, FLOP/s] at 1, 2, 4, 8, 16 and 32 rows (steps under 64 tokens interpolate it)
  attn_gbps  KV bytes per second of decode attention (bench attention, SmolLM2's heads, 4k context)
  link_latency_us, link_latency_per_rank_us   one collective, a + b x ranks, fitted to the ag_rs
             combine of bench combine (per exchange, batch 1) at 2 and 8 ranks under mpiexec
  memory_gib MemTotal

With --fit the engine's own costs are fitted at tp 1 on a warm `ctxpar serve` (prompts of 600
words, 64 new tokens, the first client 50 ms ahead of the others): step_cost_us, the decode step
(ITL p50) of 1, 4 and 16 concurrent requests less the step the planner predicts from the kernels
and collectives alone (scheduling, sampling, detokenizing, the stream), and flops_efficiency by
the step's tokens, from the one request's prefill (TTFT) and the 16 requests' second step (TTFT
p50). With --fit-tp N (implies --fit) the same is done at N ranks with 1, 2, 3 and 4 requests, at
each DCP size of --fit-dcps (default 1); with two, the decode attention's KV rate at N ranks
(attn_gbps) is fitted too, from how the step changes with the KV shard a rank reads. On a host
with fewer cores than ranks these costs are mostly the ranks' waits for one another (rank 0's
serial work per step and per sequence while the others share its cores) and many small
attention calls, which no kernel benchmark sees.

    python bench/plan/this_machine.py --ctxpar build/default/cli/ctxpar --out this_machine.json
    ~/.cache/ctxpar/venv/bin/python bench/plan/this_machine.py --fit-tp 9 --fit-dcps 1,3 \
        --out tp9.json
        (also writes tp9.base.json, the rates fitted at tp 1, for runs at tp 1)
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def weighted(results, key, rows):
    rs = [r for r in results if r["n"] == rows]
    return sum(r[key] * r["seconds"] for r in rs) / sum(r["seconds"] for r in rs)


TOKENS = 64


def kv_mib(tp):
    # Enough for 16 requests of 600 words at tp 1, and 4 at tp N (per rank).
    return 1024 if tp == 1 else 256


def serve_runs(a, tp, dcp, concurrencies):
    """Warm `ctxpar serve --tp-size tp --dcp-size dcp`; for each concurrency c, c requests of 600
    words (distinct prompts, none sharing a page with another), the first client 50 ms ahead of
    the others (the planner's closed-loop start). Returns the loadgen summaries and the server's
    chunked_prefill_size."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
    import loadgen
    import requests
    from run import Process, free_port
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Process([a.ctxpar, "serve", "--model-path", a.model, "--port", str(port), "--tp-size",
                    str(tp), "--dcp-size", str(dcp), "--dcp-comm-backend", "ag_rs",
                    "--kv-cache-mib", str(kv_mib(tp)), "--decode-log-interval", "1"], url,
                   f"{a.out}.serve-tp{tp}-dcp{dcp}.log", timeout=600)
    try:
        chunk = requests.get(url + "/get_server_info", timeout=30).json()["chunked_prefill_size"]
        prompts = loadgen.make_prompts(1 + sum(concurrencies), 600, 1)
        asyncio.run(loadgen.run_load(url, None, prompts[:1], 4, concurrency=1))  # warm-up
        out, at = [], 1
        for c in concurrencies:
            out.append(asyncio.run(loadgen.run_load(url, None, prompts[at:at + c], TOKENS,
                                                    concurrency=c, lead_s=0.05)))
            at += c
        return out, chunk
    finally:
        proc.stop()


def predict(a, h, tp, dcp, s, concurrency):
    """ctxpar plan's ITL p50 and TTFT p50 (ms) for a run like summary s, on rates h."""
    path = a.out + ".fit.json"
    with open(path, "w") as f:
        json.dump(h, f)
    plan = run([a.ctxpar, "plan", "--json", "--model-path", a.model, "--tp-size", str(tp),
                "--dcp-size", str(dcp), "--dcp-comm-backend", "ag_rs",
                "--kv-cache-mib", str(kv_mib(tp)),
                "--input-len", str(round(s["mean_prompt_tokens"])), "--output-len", str(TOKENS),
                "--concurrency", str(concurrency), "--num-requests", str(concurrency),
                "--hardware-json", path])
    os.remove(path)
    c = plan["candidates"][0]
    return c["itl_ms_p50"], c["ttft_ms_p50"]


def solve(f, target, lo=0.02, hi=2.0):
    """x in [lo, hi] with f(x) = target, f decreasing (bisection on a log scale)."""
    for _ in range(24):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
    return (lo * hi) ** 0.5


def fit_engine(a, hw, tp, dcps, concurrencies):
    """step_cost_us, flops_efficiency and (with two DCP sizes) attn_gbps at tp ranks, from warm
    servers at each DCP size of dcps.

    Decode: each run's step (ITL p50) is the planner's kernels and collectives, whose attention
    reads the rank's KV shard at attn_gbps, plus the engine's cost of a step of c sequences
    (step_cost_us, the same at every DCP size). The attention's share of a predicted step is
    linear in 1 / attn_gbps, so with two DCP sizes (different KV shards per rank) a least-squares
    fit over the concurrencies gives the KV rate that N ranks reach, and the rest is the step cost.
    Prefill: flops_efficiency by the step's tokens, at the one request's prompt (its TTFT) and at
    the largest run's second step (the others' prompts together, up to a prefill chunk: its TTFT
    p50), each the value that makes the planner's TTFT the measured one."""
    bare = dict(hw, flops_efficiency=1)
    bare.pop("step_cost_us", None)
    runs = {d: serve_runs(a, tp, d, concurrencies) for d in dcps}
    slow = dict(bare, attn_gbps=bare["attn_gbps"] / 2)
    points = []  # (dcp, c, measured, kernels at attn_gbps, the attention's share)
    for d in dcps:
        for c, s in zip(concurrencies, runs[d][0]):
            base = predict(a, bare, tp, d, s, c)[0]
            points.append((d, c, s["itl_s"]["p50"] * 1e3, base,
                           predict(a, slow, tp, d, s, c)[0] - base))
    slowdown = 1.0  # attn_gbps / the fitted rate
    if len(dcps) > 1:
        num = den = 0.0
        for c in concurrencies:
            p0, p1 = [p for p in points if p[1] == c][:2]
            da, dm = p0[4] - p1[4], (p0[2] - p0[3]) - (p1[2] - p1[3])
            num, den = num + da * dm, den + da * da
        # Step = kernels at attn_gbps + (slowdown - 1) x the attention's share + the step cost.
        slowdown = min(8.0, max(0.25, 1.0 + (num / den if den > 0 else 0.0)))
    fitted = dict(bare, attn_gbps=bare["attn_gbps"] / slowdown)
    curve, residual = [], {}
    for c in concurrencies:
        r = [m - base - share * (slowdown - 1) for d, cc, m, base, share in points if cc == c]
        residual[c] = r
        curve.append([c, max(0.0, sum(r) / len(r)) * 1e3])
    costed = dict(fitted, step_cost_us=curve)
    summaries, chunk = runs[dcps[0]]
    one, most = summaries[0], summaries[-1]
    prompt = round(one["mean_prompt_tokens"])
    second = min(chunk, (concurrencies[-1] - 1) * prompt)
    ttft = lambda h, s, c: predict(a, h, tp, dcps[0], s, c)[1]  # noqa: E731
    e1 = solve(lambda e: ttft(dict(costed, flops_efficiency=e), one, 1),
               one["ttft_s"]["p50"] * 1e3)
    efficiency = e1
    if second > prompt:
        e2 = solve(lambda e: ttft(dict(costed, flops_efficiency=[[prompt, e1], [second, e]]),
                                  most, concurrencies[-1]), most["ttft_s"]["p50"] * 1e3)
        efficiency = [[prompt, e1], [second, e2]]
    return {"attn_gbps": fitted["attn_gbps"], "step_cost_us": curve,
            "flops_efficiency": efficiency,
            f"fit_tp{tp}": {"dcps": list(dcps), "sequences": list(concurrencies),
                            "measured_decode_step_ms": [p[2] for p in points],
                            "predicted_kernels_ms": [p[3] for p in points],
                            "attention_slowdown": slowdown, "residual_ms": residual,
                            "measured_ttft_ms": [s["ttft_s"]["p50"] * 1e3 for s in summaries],
                            "prompt_tokens": prompt, "second_step_tokens": second}}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctxpar", default="build/default/cli/ctxpar")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--kv", default="smollm2-fp32", help="bench attention --kinds")
    p.add_argument("--out", required=True)
    p.add_argument("--fit", action="store_true", help="fit the engine's costs at tp 1")
    p.add_argument("--fit-tp", type=int, default=0)
    p.add_argument("--fit-dcps", default="1",
                   help="the DCP sizes of the fit at --fit-tp (two: the attention's rate too)")
    p.add_argument("--model", default=os.path.expanduser(
        "~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = p.parse_args()
    t = str(a.threads)
    curve_rows = (1, 2, 4, 8, 16, 32)
    mm = run([a.ctxpar, "bench", "matmul", "--json", "--threads", t, "--rows",
              ",".join(map(str, curve_rows)), "--weights-mib", "256", "--reps", "3"])
    # 512 rows are compute-bound: one copy of the weights, one timed run.
    mm512 = run([a.ctxpar, "bench", "matmul", "--json", "--threads", t, "--rows", "512",
                 "--weights-mib", "0", "--reps", "1"])
    att = run([a.ctxpar, "bench", "attention", "--json", "--threads", t, "--contexts", "4k",
               "--kinds", a.kv, "--reps", "3"])
    lat = {}
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    for n in (2, 8):
        out = subprocess.run(["mpiexec", "--oversubscribe", "-n", str(n), a.ctxpar, "bench",
                              "combine", "--json", "--batch", "1", "--seconds", "0.5"],
                             capture_output=True, text=True, check=True, env=env)
        rs = [r for r in json.loads(out.stdout)["results"]
              if r["backend"] == "ag_rs" and r["shape"] == "gqa"]
        lat[n] = rs[0]["us_per_layer"] / rs[0]["exchanges_per_layer"]
    per_rank = (lat[8] - lat[2]) / 6
    with open("/proc/meminfo") as f:
        mem_kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
    hw = {
        "name": f"this machine ({a.threads} threads)",
        "memory_gib": mem_kib / 2**20,
        "mem_gbps": weighted(mm["results"], "weight_gbps", 1),
        "flops": weighted(mm512["results"], "gflops", 512) * 1e9,
        "flops_small": weighted(mm["results"], "gflops", 16) * 1e9,
        "flops_curve": [[n, weighted(mm["results"], "gflops", n) * 1e9] for n in curve_rows],
        "attn_gbps": att["results"][0]["kv_read_gbps"],
        "link_latency_us": max(0.0, lat[2] - 2 * per_rank),
        "link_latency_per_rank_us": max(0.0, per_rank),
        "oneside_latency_us": max(0.0, lat[2] - 2 * per_rank),
        "load_average_1min": mm.get("load_average_1min"),
    }
    if a.fit or a.fit_tp > 1:
        base = dict(hw, **fit_engine(a, hw, 1, [1], (1, 4, 16)))
    if a.fit_tp > 1:
        # The tp-1 fit describes runs at tp 1; this file, runs at tp N.
        with open(os.path.splitext(a.out)[0] + ".base.json", "w") as f:
            json.dump(base, f, indent=2)
        dcps = [int(d) for d in a.fit_dcps.split(",")]
        hw.update(fit_engine(a, hw, a.fit_tp, dcps, (1, 2, 3, 4)))
    elif a.fit:
        hw = base
    with open(a.out, "w") as f:
        json.dump(hw, f, indent=2)
    print(json.dumps(hw, indent=2))


if __name__ == "__main__":
    main()
