"""This machine for `ctxpar plan --hardware-json`: the rates the step-time model needs, measured
by ctxpar's own benchmarks in one run (docs/plan.md):

  mem_gbps   weight bytes per second of the matmuls of a batch-1 decode step (bench matmul, rows 1)
  flops      FLOP/s of the same matmuls with 512 rows (bench matmul, rows 512: prefill)
  flops_small  the same with 16 rows (steps of fewer than 64 tokens: decode)
  attn_gbps  KV bytes per second of decode attention (bench attention, SmolLM2's heads, 4k context)
  link_latency_us, link_latency_per_rank_us   one collective, a + b x ranks, fitted to the ag_rs
             combine of bench combine (per exchange, batch 1) at 2 and 8 ranks under mpiexec
  memory_gib MemTotal

    python bench/plan/this_machine.py --ctxpar build/default/cli/ctxpar --out this_machine.json
"""
import argparse
import json
import os
import subprocess


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def weighted(results, key, rows):
    rs = [r for r in results if r["n"] == rows]
    return sum(r[key] * r["seconds"] for r in rs) / sum(r["seconds"] for r in rs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctxpar", default="build/default/cli/ctxpar")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--kv", default="smollm2-fp32", help="bench attention --kinds")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    t = str(a.threads)
    mm = run([a.ctxpar, "bench", "matmul", "--json", "--threads", t, "--rows", "1,16,512",
              "--weights-mib", "256", "--reps", "3"])
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
        "flops": weighted(mm["results"], "gflops", 512) * 1e9,
        "flops_small": weighted(mm["results"], "gflops", 16) * 1e9,
        "attn_gbps": att["results"][0]["kv_read_gbps"],
        "link_latency_us": max(0.0, lat[2] - 2 * per_rank),
        "link_latency_per_rank_us": max(0.0, per_rank),
        "oneside_latency_us": max(0.0, lat[2] - 2 * per_rank),
        "load_average_1min": mm.get("load_average_1min"),
    }
    with open(a.out, "w") as f:
        json.dump(hw, f, indent=2)
    print(json.dumps(hw, indent=2))


if __name__ == "__main__":
    main()
