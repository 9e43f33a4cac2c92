"""DCP's purpose measured and predicted: `ctxpar serve` at a fixed --kv-cache-mib per rank and a
fixed tp, one run per --dcp-size, long prompts at a fixed concurrency (bench/serve/loadgen.py),
beside `ctxpar plan`'s prediction of the same runs (--hardware-json: bench/plan/this_machine.py).
With --repeats N the sweep runs N times (each dcp size in turn, then again) and the measured
figures are the medians per configuration. Writes to --out: results.json (measured medians, each
with its runs), plan.json (the prediction), results.md (the table, with the prediction's error
relative to the measurement) and dcp_serve.png (bench/plan/plot.py). With --replan it measures
nothing and predicts the runs in --out again.

    python bench/plan/dcp_serve.py --hardware-json this_machine.json --out /tmp/dcp-serve
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "serve"))
import loadgen  # noqa: E402
from run import Process, cpu_name, free_port  # noqa: E402

# The first client leads the others by this much: the server runs its first request alone, as
# `ctxpar plan` simulates a closed loop's start (otherwise whether the clients' first requests
# share the first step depends on microseconds, and TTFT p50 with it).
LEAD_S = 0.05


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctxpar", default=os.path.join(ROOT, "build/default/cli/ctxpar"))
    p.add_argument("--model", default=os.path.expanduser(
        "~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--tp", type=int, default=9)
    p.add_argument("--dcps", default="1,3")
    p.add_argument("--kv-cache-mib", type=int, default=12)
    p.add_argument("--prompt-words", type=int, default=600)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--hardware-json", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--replan", action="store_true",
                   help="measure nothing: predict the runs of --out/results.json again (after a "
                        "change to the planner or to --hardware-json)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.replan:
        with open(os.path.join(a.out, "results.json")) as f:
            finish(a, json.load(f))
        return
    prompts = loadgen.make_prompts(a.requests, a.prompt_words, 0)
    warmup = [p.replace("Document 0:", "Warm-up:", 1) for p in
              loadgen.make_prompts(1, a.prompt_words, 1)]
    runs = []
    for repeat in range(a.repeats):
        for dcp in [int(d) for d in a.dcps.split(",")]:
            runs.append(measure(a, dcp, repeat, prompts, warmup))
    results = []
    for flags in dict.fromkeys(r["flags"] for r in runs):
        mine = [r for r in runs if r["flags"] == flags]
        med = {k: statistics.median(r[k] for r in mine) for k in
               ("ttft_ms_p50", "itl_ms_p50", "output_tokens_per_s", "retractions")}
        results.append(dict(mine[0], **med, failed=sum(r["failed"] for r in mine), runs=mine))
    finish(a, results)


def measure(a, dcp, repeat, prompts, warmup):
    flags = f"--tp-size {a.tp} --dcp-size {dcp} --dcp-comm-backend ag_rs"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Process([a.ctxpar, "serve", "--model-path", a.model, "--port", str(port),
                    "--kv-cache-mib", str(a.kv_cache_mib), "--enable-metrics",
                    "--decode-log-interval", "1", *flags.split()], url,
                   os.path.join(a.out, f"serve-dcp{dcp}-{repeat}.log"), timeout=600)
    try:
        info = requests.get(url + "/get_server_info", timeout=30).json()
        # The warm-up prompt shares no page with the measured ones (a prefix-cache hit
        # would shorten a measured prefill the simulation computes). Every step is logged
        # (--decode-log-interval 1) to compare with the simulated steps.
        asyncio.run(loadgen.run_load(url, None, warmup, 2, concurrency=1))
        s = asyncio.run(loadgen.run_load(url, None, prompts, a.max_tokens, lead_s=LEAD_S,
                                         concurrency=a.concurrency))
        metrics = requests.get(url + "/metrics", timeout=30).text
    finally:
        proc.stop()
    retractions = next((float(l.split()[-1]) for l in metrics.splitlines()
                        if l.startswith("sglang:num_retracted_reqs")), 0.0)
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    r = {"flags": flags, "dcp_size": dcp, "max_total_num_tokens": info["max_total_num_tokens"],
         "prompt_tokens": s["mean_prompt_tokens"], "retractions": retractions,
         "output_tokens_per_s": s["output_throughput"], "ttft_ms_p50": ms(s["ttft_s"]["p50"]),
         "itl_ms_p50": ms(s["itl_s"]["p50"]), "failed": s["failed"], "errors": s["errors"],
         "wall_s": s["wall_s"]}
    print(json.dumps(r), flush=True)
    return r


def finish(a, results):
    json.dump(results, open(os.path.join(a.out, "results.json"), "w"), indent=2)
    if any(r["failed"] for r in results):
        sys.exit(f"failed requests (the pool too small for one prompt?): {results}")
    prompt = round(results[0]["prompt_tokens"])
    plan = subprocess.run(
        [a.ctxpar, "plan", "--json", "--model-path", a.model, "--tp-size", str(a.tp),
         "--dcp-comm-backend", "ag_rs", "--kv-cache-mib", str(a.kv_cache_mib), "--input-len",
         str(prompt), "--output-len", str(a.max_tokens), "--concurrency", str(a.concurrency),
         "--num-requests", str(a.requests), "--hardware-json", a.hardware_json],
        capture_output=True, text=True, check=True).stdout
    open(os.path.join(a.out, "plan.json"), "w").write(plan)
    predicted = {c["flags"]: c for c in json.loads(plan)["candidates"]}
    rows = [f"CPU: {cpu_name()}; load average {os.getloadavg()[0]:.1f}; {a.requests} requests of "
            f"{prompt} prompt tokens + {a.max_tokens} at concurrency {a.concurrency}, "
            f"--kv-cache-mib {a.kv_cache_mib} per rank; measured: median of {a.repeats} run(s); "
            "(%): the prediction's error\n",
            "| flags | KV tokens meas. / pred. | TTFT p50 ms meas. / pred. | ITL p50 ms meas. / "
            "pred. | out tok/s meas. / pred. | retractions meas. / pred. |",
            "|---|---|---|---|---|---|"]
    def err(measured, pred):
        return f"{100 * (pred / measured - 1):+.0f} %" if measured else "-"

    for r in results:
        c = predicted.get(r["flags"], {})
        t, i, o = (c.get(k, 0) for k in ("ttft_ms_p50", "itl_ms_p50", "output_tokens_per_s"))
        rows.append(f"| `{r['flags']}` | {r['max_total_num_tokens']} / "
                    f"{c.get('max_total_num_tokens', '-')} | {r['ttft_ms_p50']:.0f} / {t:.0f} "
                    f"({err(r['ttft_ms_p50'], t)}) | {r['itl_ms_p50']:.1f} / {i:.1f} "
                    f"({err(r['itl_ms_p50'], i)}) | {r['output_tokens_per_s']:.2f} / {o:.2f} "
                    f"({err(r['output_tokens_per_s'], o)}) | {r['retractions']:.0f} / "
                    f"{c.get('retractions', '-')} |")
    # The planner's pick among the configurations run, against the best one measured.
    ran = [c for c in json.loads(plan)["candidates"] if c["flags"] in {r["flags"] for r in results}]
    pick = min(ran, key=lambda c: c["rank"])
    best = max(results, key=lambda r: r["output_tokens_per_s"])
    picked = next(r for r in results if r["flags"] == pick["flags"])
    rows.append(f"\nplanner's pick: `{pick['flags']}` ({picked['output_tokens_per_s']:.2f} output "
                f"tok/s measured); best measured: `{best['flags']}` "
                f"({best['output_tokens_per_s']:.2f}): the pick is "
                f"{100 * (1 - picked['output_tokens_per_s'] / best['output_tokens_per_s']):.1f} % "
                "below the best")
    open(os.path.join(a.out, "results.md"), "w").write("\n".join(rows) + "\n")
    print("\n".join(rows))
    subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), os.path.join(a.out, "plan.json"),
                    "--measured", os.path.join(a.out, "results.json"), "--out",
                    os.path.join(a.out, "dcp_serve.png")], check=True)


if __name__ == "__main__":
    main()
