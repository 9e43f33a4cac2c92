"""This machine for `ctxpar plan --hardware-json`: the rates the step-time model needs, measured
by ctxpar's own benchmarks in one run (docs/plan.md):

  mem_gbps   weight bytes per second of the matmuls of a batch-1 decode step (bench matmul, rows 1)
  flops      FLOP/s of the same matmuls with 512 rows (bench matmul, rows 512: prefill)
  flops_small  the same with 16 rows (steps of fewer than 64 tokens: decode)
  attn_gbps  KV bytes per second of decode attention (bench attention, SmolLM2's heads, 4k context)
  link_latency_us, link_latency_per_rank_us   one collective, a + b x ranks, fitted to the ag_rs
             combine of bench combine (per exchange, batch 1) at 2 and 8 ranks under mpiexec
  memory_gib MemTotal

With --fit-tp N the collective latency is instead fitted at N ranks from the engine itself: the
decode step of one request on a warm `ctxpar serve --tp-size N` (inter-token latency p50), less the step the planner predicts without any
latency, over the collectives of a step (ctxpar's engine: 4 all-gathers a layer, and the plan's
broadcast); and flops_efficiency from the same request's prefill (TTFT) (what N small shards reach of the
2-thread matmul rate). On a host with fewer cores than ranks that latency is set by the OS scheduler
(every rank must run for a collective to end), which bench combine's tight loop does not see.

    python bench/plan/this_machine.py --ctxpar build/default/cli/ctxpar --out this_machine.json
    ~/.cache/ctxpar/venv/bin/python bench/plan/this_machine.py --fit-tp 9 --out tp9.json
        (also writes tp9.base.json, the rates before the fit)
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


def fit_latency(a, hw):
    # One request on a warm `ctxpar serve --tp-size N`, as the serving runs see the engine.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
    import loadgen
    from run import Process, free_port
    tokens = 64
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Process([a.ctxpar, "serve", "--model-path", a.model, "--port", str(port), "--tp-size",
                    str(a.fit_tp), "--kv-cache-mib", "64"], url, a.out + ".serve.log", timeout=600)
    try:
        prompts = loadgen.make_prompts(2, 600, 1)
        asyncio.run(loadgen.run_load(url, None, prompts[:1], 4, concurrency=1))  # warm-up
        s = asyncio.run(loadgen.run_load(url, None, prompts[1:], tokens, concurrency=1))
    finally:
        proc.stop()
    step_ms = s["itl_s"]["p50"] * 1e3
    prefill_ms = s["ttft_s"]["p50"] * 1e3
    prompt_tokens = round(s["mean_prompt_tokens"])

    def predict(h):
        path = a.out + ".fit.json"
        with open(path, "w") as f:
            json.dump(h, f)
        plan = run([a.ctxpar, "plan", "--json", "--model-path", a.model, "--tp-size",
                    str(a.fit_tp), "--dcp-size", "1", "--dcp-comm-backend", "ag_rs", "--input-len",
                    str(prompt_tokens), "--output-len", str(tokens), "--concurrency", "1",
                    "--num-requests", "1", "--hardware-json", path])
        os.remove(path)
        c = plan["candidates"][0]
        return c["itl_ms_p50"], c["ttft_ms_p50"], 4 * plan["model"]["num_layers"] + 1

    # The decode step's residual is the collectives' latency; the prefill step's, with it,
    # scales the FLOP rate of the ranks' small shards.
    itl0, _, collectives = predict(dict(hw, link_latency_us=0, link_latency_per_rank_us=0,
                                        oneside_latency_us=0, flops_efficiency=1))
    latency = max(0.0, (step_ms - itl0) * 1e3 / collectives)
    fitted = dict(hw, link_latency_us=latency, link_latency_per_rank_us=0.0,
                  oneside_latency_us=latency, flops_efficiency=1)
    _, ttft1, _ = predict(fitted)
    waits = collectives * latency / 1e3
    efficiency = max(0.01, (ttft1 - waits) / max(1e-3, prefill_ms - waits))
    return {"link_latency_us": latency, "link_latency_per_rank_us": 0.0,
            "oneside_latency_us": latency, "flops_efficiency": min(1.0, efficiency),
            "fit": {"tp": a.fit_tp, "measured_decode_step_ms": step_ms,
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
    p.add_argument("--fit-tp", type=int, default=0)
    p.add_argument("--model", default=os.path.expanduser(
        "~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = p.parse_args()
    t = str(a.threads)
    mm = run([a.ctxpar, "bench", "matmul", "--json", "--threads", t, "--rows", "1,16",
              "--weights-mib", "256", "--reps", "3"])
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
        "attn_gbps": att["results"][0]["kv_read_gbps"],
        "link_latency_us": max(0.0, lat[2] - 2 * per_rank),
        "link_latency_per_rank_us": max(0.0, per_rank),
        "oneside_latency_us": max(0.0, lat[2] - 2 * per_rank),
        "load_average_1min": mm.get("load_average_1min"),
    }
    if a.fit_tp > 1:
        # The rates before the fit describe runs of other rank counts (tp 1: no collective).
        with open(os.path.splitext(a.out)[0] + ".base.json", "w") as f:
            json.dump(hw, f, indent=2)
        hw.update(fit_latency(a, hw))
    with open(a.out, "w") as f:
        json.dump(hw, f, indent=2)
    print(json.dumps(hw, indent=2))


if __name__ == "__main__":
    main()
