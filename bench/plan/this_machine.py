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

With --fit the engine's own costs beyond the kernels are fitted at tp 1 on a warm `ctxpar serve`
(prompts of 600 words, 64 new tokens): step_overhead_us and per_seq_us from the decode steps
(inter-token latency p50) of 1 and 8 concurrent requests, less the steps the planner predicts
without them (scheduling, sampling, detokenizing, the stream), and flops_efficiency from the one
request's prefill (TTFT). With --fit-tp N (implies --fit) the same is then done at N ranks on
`ctxpar serve --tp-size N` with 1 and 4 requests: per_seq_us from the growth of the decode step's
residual with the sequences (rank 0's work per sequence, which the other ranks wait for on the
cores they share), the collective latency from the one request's residual over the collectives
of a step (ctxpar's engine: 4 all-gathers a layer, and the plan's broadcast), and
flops_efficiency from that request's prefill (what N small shards reach of the 2-thread matmul
rate). On a host with fewer cores than ranks that latency is
set by the OS scheduler (every rank must run for a collective to end), which bench combine's
tight loop does not see.

    python bench/plan/this_machine.py --ctxpar build/default/cli/ctxpar --out this_machine.json
    ~/.cache/ctxpar/venv/bin/python bench/plan/this_machine.py --fit-tp 9 --out tp9.json
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


def serve_runs(a, tp, concurrencies):
    """Warm `ctxpar serve --tp-size tp`; for each concurrency c, c requests of 600 words at once
    (distinct prompts, none sharing a page with another). Returns the loadgen summaries."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
    import loadgen
    from run import Process, free_port
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Process([a.ctxpar, "serve", "--model-path", a.model, "--port", str(port), "--tp-size",
                    str(tp), "--kv-cache-mib", "256"], url, f"{a.out}.serve-tp{tp}.log",
                   timeout=600)
    try:
        prompts = loadgen.make_prompts(1 + sum(concurrencies), 600, 1)
        asyncio.run(loadgen.run_load(url, None, prompts[:1], 4, concurrency=1))  # warm-up
        out, at = [], 1
        for c in concurrencies:
            out.append(asyncio.run(loadgen.run_load(url, None, prompts[at:at + c], TOKENS,
                                                    concurrency=c)))
            at += c
        return out
    finally:
        proc.stop()


def predict(a, h, tp, s, concurrency):
    """ctxpar plan's ITL p50 and TTFT p50 (ms) for a run like summary s, on rates h."""
    path = a.out + ".fit.json"
    with open(path, "w") as f:
        json.dump(h, f)
    plan = run([a.ctxpar, "plan", "--json", "--model-path", a.model, "--tp-size", str(tp),
                "--dcp-size", "1", "--dcp-comm-backend", "ag_rs", "--kv-cache-mib", "256",
                "--input-len", str(round(s["mean_prompt_tokens"])), "--output-len", str(TOKENS),
                "--concurrency", str(concurrency), "--num-requests", str(concurrency),
                "--hardware-json", path])
    os.remove(path)
    c = plan["candidates"][0]
    return c["itl_ms_p50"], c["ttft_ms_p50"], 4 * plan["model"]["num_layers"] + 1


def fit_tp1(a, hw):
    # Decode steps of 1 and 8 sequences: the residual over the kernels' prediction is a step
    # overhead plus a cost per sequence; the one request's prefill then gives the FLOP efficiency.
    one, eight = serve_runs(a, 1, [1, 8])
    bare = dict(hw, step_overhead_us=0, per_seq_us=0, flops_efficiency=1)
    r1 = one["itl_s"]["p50"] * 1e3 - predict(a, bare, 1, one, 1)[0]
    r8 = eight["itl_s"]["p50"] * 1e3 - predict(a, bare, 1, eight, 8)[0]
    per_seq = max(0.0, (r8 - r1) / 7) * 1e3
    overhead = max(0.0, r1 * 1e3 - per_seq)
    costs = dict(bare, step_overhead_us=overhead, per_seq_us=per_seq)
    _, ttft, _ = predict(a, costs, 1, one, 1)
    prefill_ms = one["ttft_s"]["p50"] * 1e3
    fixed = (overhead + per_seq) / 1e3
    efficiency = max(0.01, (ttft - fixed) / max(1e-3, prefill_ms - fixed))
    return {"step_overhead_us": overhead, "per_seq_us": per_seq,
            "flops_efficiency": min(1.0, efficiency),
            "fit_tp1": {"measured_decode_step_ms": [one["itl_s"]["p50"] * 1e3,
                                                    eight["itl_s"]["p50"] * 1e3],
                        "decode_batch": [1, 8], "residual_ms": [r1, r8],
                        "measured_prefill_ms": prefill_ms,
                        "prompt_tokens": one["mean_prompt_tokens"],
                        "predicted_prefill_ms_at_full_rate": ttft}}


def fit_latency(a, hw):
    # One and four requests on a warm `ctxpar serve --tp-size N`, as the serving runs see the
    # engine. Rank 0's work per sequence (sampling, detokenizing) runs while the other ranks
    # wait for it, on cores they share: the decode steps' residual grows with the sequences
    # (per_seq_us at N ranks) and, at one sequence, the rest is the collectives' latency.
    s, s4 = serve_runs(a, a.fit_tp, [1, 4])
    step_ms = s["itl_s"]["p50"] * 1e3
    prefill_ms = s["ttft_s"]["p50"] * 1e3
    prompt_tokens = round(s["mean_prompt_tokens"])
    bare = dict(hw, link_latency_us=0, link_latency_per_rank_us=0, oneside_latency_us=0,
                flops_efficiency=1)
    itl0, _, collectives = predict(a, bare, a.fit_tp, s, 1)
    itl4, _, _ = predict(a, bare, a.fit_tp, s4, 4)
    r1, r4 = step_ms - itl0, s4["itl_s"]["p50"] * 1e3 - itl4
    per_seq = max(0.0, hw.get("per_seq_us", 0) + (r4 - r1) / 3 * 1e3)
    bare["per_seq_us"] = per_seq
    itl0, _, _ = predict(a, bare, a.fit_tp, s, 1)
    latency = max(0.0, (step_ms - itl0) * 1e3 / collectives)
    fitted = dict(bare, link_latency_us=latency, link_latency_per_rank_us=0.0,
                  oneside_latency_us=latency, flops_efficiency=1)
    _, ttft1, _ = predict(a, fitted, a.fit_tp, s, 1)
    waits = collectives * latency / 1e3
    efficiency = max(0.01, (ttft1 - waits) / max(1e-3, prefill_ms - waits))
    return {"link_latency_us": latency, "link_latency_per_rank_us": 0.0,
            "oneside_latency_us": latency, "flops_efficiency": min(1.0, efficiency),
            "per_seq_us": per_seq,
            "fit": {"tp": a.fit_tp, "measured_decode_step_ms": step_ms,
                    "measured_decode_step_ms_4_sequences": s4["itl_s"]["p50"] * 1e3,
                    "predicted_decode_step_ms_without_latency": itl0,
                    "measured_prefill_ms": prefill_ms, "prompt_tokens": prompt_tokens,
                    "predicted_prefill_ms_at_full_rate": ttft1,
                    "collectives_per_step": collectives}}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctxpar", default="build/default/cli/ctxpar")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--kv", default="smollm2-fp32", help="bench attention --kinds")
    p.add_argument("--out", required=True)
    p.add_argument("--fit", action="store_true", help="fit the engine's costs at tp 1")
    p.add_argument("--fit-tp", type=int, default=0)
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
        hw.update(fit_tp1(a, hw))
    if a.fit_tp > 1:
        # The tp-1 rates describe runs of other rank counts (tp 1: no collective).
        with open(os.path.splitext(a.out)[0] + ".base.json", "w") as f:
            json.dump(hw, f, indent=2)
        hw.update(fit_latency(a, hw))
    with open(a.out, "w") as f:
        json.dump(hw, f, indent=2)
    print(json.dumps(hw, indent=2))


if __name__ == "__main__":
    main()
