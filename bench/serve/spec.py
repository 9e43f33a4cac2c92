"""run.py --workload spec: speculative decoding served, against plain decoding and llama-server.

Four servers on one GGUF, each restarted per concurrency level (llama-server's --parallel slots
are the level): ctxpar serve, ctxpar serve --speculative-algorithm NGRAM, llama-server, and
llama-server with its own n-gram speculation (--spec-type ngram-simple), drafting as many
tokens a step as ctxpar (--speculative-num-draft-tokens K: K - 1 drafts; llama-server's
--spec-draft-n-max K - 1). The prompts are repetitive ledgers (loadgen.make_ledgers) that the
model continues line by line; every request is greedy with ignore_eos, so both speeds of a
server give the same tokens. Each level runs --repeats times on the same warm server; the table
gives the median output tok/s, the runs beside it, and each server's speed over its own plain
decoding. ctxpar's sglang:spec_accept_length (tokens per verify step) comes from /metrics.

    python bench/serve/run.py --workload spec --out /tmp/spec-bench
"""

import asyncio
import json
import os
import statistics
import sys

import loadgen
from run import Process, cpu_name, fmt, free_port, llama_env, metric


def servers(args):
    """(tag, plain tag, command builder(port, slots), env) of the four servers."""
    drafts = args.draft_tokens - 1

    def ctxpar(extra):
        def cmd(port, slots):
            return [args.ctxpar, "serve", "--model-path", args.model, "--port", str(port),
                    "--enable-metrics", "--max-running-requests", str(max(slots, 1)),
                    *args.ctxpar_flags.split(), *extra]
        return cmd

    def llama(extra):
        def cmd(port, slots):
            return [os.path.join(args.llama_bin, "llama-server"), "-m", args.model, "--host",
                    "127.0.0.1", "--port", str(port), "--parallel", str(slots), "-c",
                    str(slots * args.slot_context), "-t", str(args.threads), "--cont-batching",
                    *extra]
        return cmd

    out = [("ctxpar", "ctxpar", ctxpar([]), None),
           ("ctxpar NGRAM", "ctxpar",
            ctxpar(["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens",
                    str(args.draft_tokens)]), None)]
    if not args.skip_llama:
        env = llama_env(args)
        out += [("llama.cpp", "llama.cpp", llama([]), env),
                ("llama.cpp ngram-simple", "llama.cpp",
                 llama(["--spec-type", "ngram-simple", "--spec-draft-n-max", str(drafts)]), env)]
    return out


def run_spec(args, levels):
    # Every run sends ledgers no server has seen (no prefix cache hit), the same ones to each.
    most = max(args.requests_per_level(c) for c in levels)
    prompts = loadgen.make_ledgers(1 + most * args.repeats, args.ledger_rows, args.seed)
    rows = []
    for tag, plain, cmd, env in servers(args):
        for c in levels:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            log = os.path.join(args.out, f"spec-{tag.replace(' ', '-')}-{c}.log")
            p = Process(cmd(port, c), url, log, env=env)
            try:
                asyncio.run(loadgen.run_load(url, None, prompts[-1:], 4, concurrency=1))
                n = args.requests_per_level(c)
                runs = [asyncio.run(loadgen.run_load(url, None, prompts[k * n:(k + 1) * n],
                                                     args.max_tokens, concurrency=c))
                        for k in range(args.repeats)]
                accept = metric(url, "sglang:spec_accept_length") if tag == "ctxpar NGRAM" else None
            finally:
                p.stop()
            rates = [r["output_throughput"] for r in runs]
            row = {"server": tag, "plain": plain, "concurrency": c, "requests": n,
                   "failed": sum(r["failed"] for r in runs), "output_throughput": rates,
                   "median": statistics.median(rates),
                   "tpot_p50": statistics.median(r["tpot_s"]["p50"] for r in runs),
                   "accept_length": accept}
            rows.append(row)
            print(f"{tag} concurrency {c}: {fmt(row['median'], 1)} tok/s "
                  f"({', '.join(fmt(x, 1) for x in rates)}), failed {row['failed']}", flush=True)
    for row in rows:
        base = next(r for r in rows if r["server"] == row["plain"]
                    and r["concurrency"] == row["concurrency"])
        row["vs_plain"] = row["median"] / base["median"]
    return rows


def spec_table(rows):
    out = ["| server | concurrency | output tok/s, median (runs) | vs its plain decoding | "
           "TPOT p50 (s) | accept length | failed |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["concurrency"], r["server"])):
        runs = ", ".join(fmt(x, 1) for x in r["output_throughput"])
        out.append(f"| {r['server']} | {r['concurrency']} | {fmt(r['median'], 1)} ({runs}) | "
                   f"{fmt(r['vs_plain'])}x | {fmt(r['tpot_p50'], 3)} | "
                   f"{fmt(r['accept_length'])} | {r['failed']} |")
    return "\n".join(out) + "\n"


def main_spec(args, levels):
    load_before = os.getloadavg()
    rows = run_spec(args, levels)
    cpu = f"{cpu_name()}, {os.cpu_count()} cores"
    meta = {"cpu": cpu, "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "model": os.path.basename(args.model), "max_tokens": args.max_tokens,
            "ledger_rows": args.ledger_rows, "draft_tokens": args.draft_tokens,
            "repeats": args.repeats, "llama_omp_wait": args.llama_omp_wait,
            "ctxpar_flags": args.ctxpar_flags, "command": " ".join(sys.argv)}
    with open(os.path.join(args.out, "spec.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    head = (f"{cpu}; {meta['model']}; load average {load_before[0]:.1f} before, "
            f"{meta['load_average_after'][0]:.1f} after; ledgers of {args.ledger_rows} lines, "
            f"{args.max_tokens} new tokens, greedy; --speculative-num-draft-tokens "
            f"{args.draft_tokens}; medians of {args.repeats}\n\n")
    md = spec_table(rows)
    with open(os.path.join(args.out, "spec.md"), "w") as f:
        f.write(head + md)
    print(head + md)
