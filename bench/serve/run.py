"""Serving benchmark: `ctxpar serve` beside llama.cpp's `llama-server`, same GGUF, same prompts.

For each server in turn it starts the server, sends a warm-up request, then runs the load
generator (loadgen.py) at fixed concurrency 1, 4, 16 and 64 and as an open-loop Poisson arrival,
and writes to --out:
  results.json   every summary (TTFT, ITL, TPOT, E2E p50/p99, request and output throughput)
  results.md     the table
  serve.png      output throughput and TTFT p50 against concurrency, both servers
llama-server gets as many --parallel slots as the concurrency (restarted per level, continuous
batching on, -t = the cores); ctxpar serve runs once with --max-running-requests 64.

    python bench/serve/run.py --ctxpar build/default/cli/ctxpar --out /tmp/serve-bench

--vllm adds vLLM's CPU build as a third server (--peers picks any of ctxpar, llama, vllm): its
venv and a bf16 Hugging Face checkpoint dequantized from the same GGUF come from
bench/serve/vllm_env.sh (vllm_peer.py), and it runs once with --max-num-seqs = the top level,
on the same prompt text (its tokenizer is the model's Hugging Face tokenizer; results.md shows
the prompt tokens each server counted). --ctxpar-flags given more than once runs ctxpar serve
once per value, each its own row ("ctxpar", "ctxpar --dtype auto", ...).

    python bench/serve/run.py --vllm --peers ctxpar,vllm --ctxpar-flags "" \
        --ctxpar-flags "--dtype auto" --levels 1,16,64 --poisson-requests 0 --out /tmp/serve-vllm

With --workload prefix it measures the prefix cache instead, on one trace for three servers:
ctxpar serve (cache on), ctxpar serve --disable-radix-cache and llama-server (its prompt cache
on, --cache-reuse): SGLang bench_serving's generated-shared-prefix trace (the first request of
each group, then the others at --prefix-concurrency) and --users multi-turn conversations of
--turns turns, then (with --small-kv-mib) the
shared-prefix trace through a small pool with and without the cache, counting retractions. It
writes prefix.json, prefix.md and prefix.png (TTFT p50 per turn, and first against later
requests of a group).

    python bench/serve/run.py --workload prefix --small-kv-mib 160 --out /tmp/prefix-bench

With --workload spec it measures speculative decoding (spec.py): ctxpar serve with and without
--speculative-algorithm NGRAM beside llama-server with and without its n-gram speculation, on
repetitive ledgers, at concurrency 1 and 16 by default, medians of --repeats runs.

    python bench/serve/run.py --workload spec --llama-omp-wait "" --out /tmp/spec-bench
"""


import argparse
import asyncio
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    def __init__(self, cmd, url, log_path, env=None, timeout=300):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, **(env or {})})
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {self.proc.returncode}; see {log_path}")
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"{cmd[0]} not ready in {timeout} s; see {log_path}")
            time.sleep(0.25)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def cpu_name():
    """Model name, family / model and the widest vector ISA, from /proc/cpuinfo."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    key, value = (x.strip() for x in line.split(":", 1))
                    info.setdefault(key, value)
    except OSError:
        return platform.processor()
    flags = info.get("flags", "").split()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    return (f"{info.get('model name', platform.processor())} (family {info.get('cpu family')}, "
            f"model {info.get('model')}, {isa})")


def measure(url, model, args, levels, tag):
    prompts = loadgen.make_prompts(max(args.requests_per_level(c) for c in levels),
                                   args.prompt_words, args.seed)
    asyncio.run(loadgen.run_load(url, model, prompts[:1], 4, concurrency=1))  # warm-up
    out = []
    for c in levels:
        n = args.requests_per_level(c)
        s = asyncio.run(loadgen.run_load(url, model, prompts[:n], args.max_tokens, concurrency=c))
        s["server"] = tag
        print(f"{tag} concurrency {c}: {s['output_throughput']:.1f} tok/s, TTFT p50 "
              f"{fmt(s['ttft_s']['p50'])} s, prompt tokens {fmt(s['mean_prompt_tokens'], 1)}, "
              f"failed {s['failed']}{'' if not s['failed'] else ' ' + str(s['errors'][:1])}",
              flush=True)
        out.append(s)
    return out


def ctxpar_tag(flags, variants):
    """"ctxpar" alone; with several --ctxpar-flags, "ctxpar" plus each one's flags."""
    return "ctxpar" if len(variants) == 1 or not flags.strip() else f"ctxpar {flags.strip()}"


def run_ctxpar(args, levels, flags=None, tag="ctxpar", log="ctxpar-serve.log"):
    flags = args.ctxpar_flags if flags is None else flags
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [args.ctxpar, "serve", "--model-path", args.model, "--port", str(port),
           "--max-running-requests", str(max(levels)), *flags.split()]
    p = Process(cmd, url, os.path.join(args.out, log))
    try:
        results = measure(url, None, args, levels, tag)
        if args.poisson_requests > 0:
            results.append(poisson(url, args, tag))
    finally:
        p.stop()
    for r in results:
        r["flags"] = flags
    return results


def run_vllm(args, levels):
    """vLLM's CPU build, once, with as many sequences as the top level (vllm_peer.py)."""
    import vllm_peer
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd, env = vllm_peer.command(args, port, max(levels))
    p = Process(cmd, url, os.path.join(args.out, "vllm-serve.log"), env=env,
                timeout=args.vllm_start_timeout)
    try:
        results = measure(url, args.vllm_served_name, args, levels, "vLLM")
        if args.poisson_requests > 0:
            results.append(poisson(url, args, "vLLM", model=args.vllm_served_name))
    finally:
        p.stop()
    for r in results:
        r["flags"] = " ".join(cmd[3:])
    return results


def run_llama(args, levels):
    results = []
    for c in levels + (["poisson"] if args.poisson_requests > 0 else []):
        slots = args.poisson_slots if c == "poisson" else c
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [os.path.join(args.llama_bin, "llama-server"), "-m", args.model, "--host",
               "127.0.0.1", "--port", str(port), "--parallel", str(slots), "-c",
               str(slots * args.slot_context), "-t", str(args.threads), "--cont-batching"]
        p = Process(cmd, url, os.path.join(args.out, f"llama-server-{c}.log"),
                    env=llama_env(args))
        try:
            if c == "poisson":
                results.append(poisson(url, args, "llama.cpp"))
            else:
                results += measure(url, None, args, [c], "llama.cpp")
        finally:
            p.stop()
    return results


def llama_env(args):
    """llama-server's OMP_WAIT_POLICY, unless "" (its own default)."""
    return {"OMP_WAIT_POLICY": args.llama_omp_wait} if args.llama_omp_wait else None


def poisson(url, args, tag, model=None):
    prompts = loadgen.make_prompts(args.poisson_requests, args.prompt_words, args.seed + 1)
    s = asyncio.run(loadgen.run_load(url, model, prompts, args.max_tokens, rate=args.rate,
                                     seed=args.seed))
    s["server"] = tag
    print(f"{tag} Poisson {args.rate}/s: {s['output_throughput']:.1f} tok/s, TTFT p50 "
          f"{s['ttft_s']['p50']:.2f} s, failed {s['failed']}", flush=True)
    return s


def prefix_servers(args):
    """(tag, command builder, log name) of the three servers of --workload prefix."""
    def ctxpar(extra):
        def cmd(port):
            return [args.ctxpar, "serve", "--model-path", args.model, "--port", str(port),
                    "--enable-metrics", "--max-running-requests", str(args.prefix_concurrency),
                    *args.ctxpar_flags.split(), *extra]
        return cmd

    def llama(port):
        slots = max(args.prefix_concurrency, args.users)
        return [os.path.join(args.llama_bin, "llama-server"), "-m", args.model, "--host",
                "127.0.0.1", "--port", str(port), "--parallel", str(slots), "-c",
                str(slots * args.slot_context), "-t", str(args.threads), "--cont-batching",
                "--cache-reuse", str(args.cache_reuse)]

    servers = [("ctxpar", ctxpar([]), "ctxpar-prefix"),
               ("ctxpar --disable-radix-cache", ctxpar(["--disable-radix-cache"]),
                "ctxpar-nocache")]
    if not args.skip_llama:
        servers.append(("llama.cpp", llama, "llama-server-prefix"))
    return servers


def metric(url, name):
    try:
        for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    except requests.RequestException:
        pass
    return None


def p50(values):
    return loadgen.percentile([v for v in values if v is not None], 0.5)


def prefix_summary(tag, shared, turns):
    first = [r["ttft"] for r in shared["records"] if r["index"] == 0]
    later = [r["ttft"] for r in shared["records"] if r["index"] > 0]
    per_turn = {}
    for r in turns["records"]:
        per_turn.setdefault(r["turn"], []).append(r["ttft"])
    cached = [r["cached_tokens"] or 0 for r in shared["records"] + turns["records"]]
    prompt = [r["prompt_tokens"] or 0 for r in shared["records"] + turns["records"]]
    return {"server": tag, "shared_output_throughput": shared["output_throughput"],
            "shared_ttft_first_p50": p50(first), "shared_ttft_later_p50": p50(later),
            "shared_failed": shared["failed"], "turns_failed": turns["failed"],
            "turn_ttft_p50": {t: p50(v) for t, v in sorted(per_turn.items())},
            "later_turns_ttft_p50": p50([r["ttft"] for r in turns["records"] if r["turn"] > 0]),
            "cached_share": sum(cached) / max(1, sum(prompt))}


def run_prefix(args):
    trace = loadgen.make_shared_prefix(args.groups, args.prompts_per_group, args.system_words,
                                       args.question_words, args.seed)
    summaries, raw = [], {}
    for tag, cmd, log in prefix_servers(args):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        p = Process(cmd(port), url, os.path.join(args.out, f"{log}.log"),
                    env=llama_env(args) if "llama" in tag else None)
        try:
            warm = loadgen.make_prompts(1, 16, args.seed + 7)
            asyncio.run(loadgen.run_load(url, None, warm, 4, concurrency=1))
            shared = asyncio.run(loadgen.run_shared_prefix(url, None, trace, args.max_tokens,
                                                           args.prefix_concurrency))
            turns = asyncio.run(loadgen.run_multi_turn(
                url, None, args.users, args.turns, args.system_words, args.question_words,
                args.max_tokens, args.seed + 1))
            s = prefix_summary(tag, shared, turns)
            if tag.startswith("ctxpar"):
                s["retractions"] = metric(url, "sglang:num_retracted_reqs")
            summaries.append(s)
            raw[tag] = {"shared": shared, "turns": turns}
            print(f"{tag}: shared prefix {s['shared_output_throughput']:.1f} tok/s, TTFT p50 "
                  f"first {fmt(s['shared_ttft_first_p50'])} s later "
                  f"{fmt(s['shared_ttft_later_p50'])} s; turns TTFT p50 "
                  f"{[fmt(v) for v in s['turn_ttft_p50'].values()]}", flush=True)
        finally:
            p.stop()
    small = []
    if args.small_kv_mib > 0:
        for tag, extra in (("ctxpar", []), ("ctxpar --disable-radix-cache",
                                            ["--disable-radix-cache"])):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [args.ctxpar, "serve", "--model-path", args.model, "--port", str(port),
                   "--enable-metrics", "--max-running-requests", str(args.prefix_concurrency),
                   "--kv-cache-mib", str(args.small_kv_mib), *args.ctxpar_flags.split(), *extra]
            p = Process(cmd, url, os.path.join(args.out, f"small-kv-{len(small)}.log"))
            try:
                shared = asyncio.run(loadgen.run_shared_prefix(url, None, trace, args.max_tokens,
                                                               args.prefix_concurrency))
                small.append({"server": tag, "kv_cache_mib": args.small_kv_mib,
                              "max_total_num_tokens": metric(url, "sglang:max_total_num_tokens"),
                              "retractions": metric(url, "sglang:num_retracted_reqs"),
                              "output_throughput": shared["output_throughput"],
                              "ttft_p50": shared["ttft_s"]["p50"], "failed": shared["failed"]})
                print(f"{tag} at --kv-cache-mib {args.small_kv_mib}: {small[-1]}", flush=True)
            finally:
                p.stop()
    return summaries, raw, small


def prefix_table(summaries, small):
    rows = ["| server | shared-prefix output tok/s | TTFT p50 first / later of a group (s) | "
            "multi-turn TTFT p50 per turn (s) | later turns p50 (s) | cached share of prompt "
            "tokens | retractions |", "|---|---|---|---|---|---|---|"]
    for s in summaries:
        turns = " / ".join(fmt(v) for v in s["turn_ttft_p50"].values())
        rows.append(f"| {s['server']} | {fmt(s['shared_output_throughput'], 1)} | "
                    f"{fmt(s['shared_ttft_first_p50'])} / {fmt(s['shared_ttft_later_p50'])} | "
                    f"{turns} | {fmt(s['later_turns_ttft_p50'])} | "
                    f"{fmt(s['cached_share'])} | {fmt(s.get('retractions'), 0)} |")
    if small:
        rows += ["", "| server (small pool) | --kv-cache-mib | max_total_num_tokens | "
                 "retractions | output tok/s | TTFT p50 (s) |", "|---|---|---|---|---|---|"]
        for s in small:
            rows.append(f"| {s['server']} | {s['kv_cache_mib']} | "
                        f"{fmt(s['max_total_num_tokens'], 0)} | {fmt(s['retractions'], 0)} | "
                        f"{fmt(s['output_throughput'], 1)} | {fmt(s['ttft_p50'])} |")
    return "\n".join(rows) + "\n"


def prefix_plot(summaries, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for s, marker in zip(summaries, "os^"):
        turns = list(s["turn_ttft_p50"])
        a.plot([t + 1 for t in turns], [s["turn_ttft_p50"][t] for t in turns], marker=marker,
               label=s["server"])
    a.set_xlabel("turn")
    a.set_ylabel("TTFT p50 (s)")
    a.set_title("multi-turn conversations", fontsize=9)
    width = 0.8 / max(1, len(summaries))
    for i, s in enumerate(summaries):
        b.bar([x + i * width for x in (0, 1)],
              [s["shared_ttft_first_p50"] or 0, s["shared_ttft_later_p50"] or 0], width,
              label=s["server"])
    b.set_xticks([width * (len(summaries) - 1) / 2 + x for x in (0, 1)],
                 ["first of a group", "later of a group"])
    b.set_ylabel("TTFT p50 (s)")
    b.set_title("shared system prompt", fontsize=9)
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


def table(results):
    rows = ["| server | load | requests (failed) | prompt tokens | output tok/s | req/s | "
            "TTFT p50 / p99 (s) | ITL p50 / p99 (s) | TPOT p50 / p99 (s) | E2E p50 / p99 (s) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        load = f"concurrency {r['concurrency']}" if r["rate"] is None else f"Poisson {r['rate']}/s"
        rows.append(
            f"| {r['server']} | {load} | {r['requests']} ({r['failed']}) | "
            f"{fmt(r.get('mean_prompt_tokens'), 1)} | "
            f"{fmt(r['output_throughput'], 1)} | {fmt(r['request_throughput'], 3)} | "
            f"{fmt(r['ttft_s']['p50'])} / {fmt(r['ttft_s']['p99'])} | "
            f"{fmt(r['itl_s']['p50'], 3)} / {fmt(r['itl_s']['p99'], 3)} | "
            f"{fmt(r['tpot_s']['p50'], 3)} / {fmt(r['tpot_s']['p99'], 3)} | "
            f"{fmt(r['e2e_s']['p50'])} / {fmt(r['e2e_s']['p99'])} |")
    return "\n".join(rows) + "\n"


def plot(results, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    servers = list(dict.fromkeys(r["server"] for r in results))
    for server, marker in zip(servers, "os^vDP*X"):
        rs = [r for r in results if r["server"] == server and r["rate"] is None]
        if not rs:
            continue
        c = [r["concurrency"] for r in rs]
        a.plot(c, [r["output_throughput"] for r in rs], marker=marker, label=server)
        b.plot(c, [r["ttft_s"]["p50"] for r in rs], marker=marker, label=server)
    for ax, label in ((a, "output throughput (tokens/s)"), (b, "TTFT p50 (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctxpar", default=os.path.join(ROOT, "build/default/cli/ctxpar"))
    p.add_argument("--ctxpar-flags", action="append", default=None,
                   help="extra flags of ctxpar serve; given more than once (serve workload), "
                   "ctxpar serve runs once per value (\"\": its defaults)")
    p.add_argument("--llama-bin", default=None, help="llama-server's directory (default: built "
                   "by bench/llama_cpp/build.sh)")
    p.add_argument("--model", default=os.environ.get("CTXPAR_MODEL"))
    p.add_argument("--out", required=True)
    p.add_argument("--levels", default=None, help="concurrencies (default 1,4,16,64; spec: 1,16)")
    p.add_argument("--requests", type=int, default=0,
                   help="requests per level (default: max(4, concurrency))")
    p.add_argument("--rate", type=float, default=0.25, help="Poisson arrivals per second")
    p.add_argument("--poisson-requests", type=int, default=16, help="0: no Poisson run")
    p.add_argument("--poisson-slots", type=int, default=16)
    p.add_argument("--prompt-words", type=int, default=513, help="513: 520-token prompts")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--slot-context", type=int, default=1024)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--llama-omp-wait", default="PASSIVE",
                   help="OMP_WAIT_POLICY of llama-server: its OpenMP threads spin at barriers "
                   "when ACTIVE, which on a shared 2-core machine costs it 5-10x (\"\": its "
                   "own default)")
    p.add_argument("--skip-llama", action="store_true")
    p.add_argument("--peers", default=None,
                   help="serve workload: servers to run, of ctxpar, llama, vllm, separated by "
                   "commas (default ctxpar,llama; ctxpar only with --skip-llama; plus vllm with "
                   "--vllm)")
    p.add_argument("--vllm", action="store_true",
                   help="serve workload: also run vLLM's CPU build (bench/serve/vllm_env.sh)")
    p.add_argument("--vllm-python", default=None,
                   help="python of the vLLM venv (default: from bench/serve/vllm_env.sh)")
    p.add_argument("--vllm-model", default=None,
                   help="Hugging Face checkpoint directory vLLM serves (default: the bf16 one "
                   "bench/serve/vllm_env.sh converts from the GGUF)")
    p.add_argument("--vllm-served-name", default="smollm2-135m-instruct-bf16")
    p.add_argument("--vllm-dtype", default="bfloat16")
    p.add_argument("--vllm-max-model-len", type=int, default=None,
                   help="default: the prompt words + 64 + max tokens, rounded up to 256")
    p.add_argument("--vllm-kv-gib", type=float, default=4,
                   help="VLLM_CPU_KVCACHE_SPACE (GiB of KV cache)")
    p.add_argument("--vllm-reserved-cpus", default="0",
                   help="VLLM_CPU_NUM_OF_RESERVED_CPU: cores vLLM keeps off its model's OpenMP "
                   "threads for its scheduler (default 0: the model on all cores; \"\": vLLM's "
                   "own, one on x86, so on 2 cores its model runs on 1)")
    p.add_argument("--vllm-preload", default="auto",
                   help="LD_PRELOAD of vLLM (auto: tcmalloc and the venv's libiomp5 if found)")
    p.add_argument("--vllm-flags", default="", help="extra flags of vLLM's api_server")
    p.add_argument("--vllm-start-timeout", type=int, default=1200)
    p.add_argument("--workload", choices=["serve", "prefix", "spec"], default="serve")
    p.add_argument("--repeats", type=int, default=3, help="spec: runs per level")
    p.add_argument("--ledger-rows", type=int, default=16, help="spec: lines of each ledger")
    p.add_argument("--draft-tokens", type=int, default=8,
                   help="spec: --speculative-num-draft-tokens (llama-server drafts one fewer)")
    p.add_argument("--groups", type=int, default=4, help="prefix: system prompts")
    p.add_argument("--prompts-per-group", type=int, default=8)
    p.add_argument("--system-words", type=int, default=512)
    p.add_argument("--question-words", type=int, default=32)
    p.add_argument("--prefix-concurrency", type=int, default=16)
    p.add_argument("--users", type=int, default=4, help="prefix: multi-turn conversations")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--cache-reuse", type=int, default=256, help="llama-server's --cache-reuse")
    p.add_argument("--small-kv-mib", type=int, default=0,
                   help="prefix: also run the shared-prefix trace at this --kv-cache-mib")
    args = p.parse_args()
    if not args.model:
        args.model = subprocess.check_output(["bash", os.path.join(ROOT, "scripts/fetch-model.sh")],
                                             text=True).strip()
    if args.levels is None:
        args.levels = "1,16" if args.workload == "spec" else "1,4,16,64"
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        p.error(f"--levels takes concurrencies separated by commas, not {args.levels!r}")
    if any(c < 1 for c in levels):
        p.error("every level of --levels must be at least 1")
    if args.poisson_requests < 0 or (args.poisson_requests > 0 and not args.rate > 0):
        p.error("--rate must be positive (--poisson-requests 0 skips the Poisson run)")
    if args.requests < 0 or args.prompt_words < 1 or args.max_tokens < 1:
        p.error("--requests must be >= 0, --prompt-words and --max-tokens >= 1")
    args.requests_per_level = (lambda c: args.requests or max(4, c))
    args.ctxpar_variants = args.ctxpar_flags or [""]
    args.ctxpar_flags = args.ctxpar_variants[0]
    if args.peers is None:
        peers = ["ctxpar"] + ([] if args.skip_llama else ["llama"]) + (["vllm"] if args.vllm
                                                                        else [])
    else:
        peers = [x.strip() for x in args.peers.split(",") if x.strip()]
        if args.vllm and "vllm" not in peers:
            peers.append("vllm")
    if not peers or any(x not in ("ctxpar", "llama", "vllm") for x in peers):
        p.error(f"--peers takes ctxpar, llama and vllm separated by commas, not {args.peers!r}")
    if args.workload != "serve" and (args.vllm or args.peers is not None
                                     or len(args.ctxpar_variants) > 1):
        p.error("--peers, --vllm and more than one --ctxpar-flags are for --workload serve")
    args.peers = peers
    os.makedirs(args.out, exist_ok=True)
    if args.workload == "spec" and (args.repeats < 1 or args.ledger_rows < 1
                                    or args.draft_tokens < 2):
        p.error("spec: --repeats and --ledger-rows must be >= 1, --draft-tokens >= 2")
    if args.workload == "prefix":
        return main_prefix(args)
    if args.workload == "spec":
        import spec
        if not args.skip_llama and args.llama_bin is None:
            args.llama_bin = subprocess.check_output(
                ["bash", os.path.join(ROOT, "bench/llama_cpp/build.sh")], text=True).split()[-1]
        return spec.main_spec(args, levels)
    if "vllm" in args.peers:
        import vllm_peer
        vllm_peer.resolve(args, ROOT)  # before any server runs: builds the venv if it is missing
    load_before = os.getloadavg()
    results = []
    for peer in args.peers:
        if peer == "ctxpar":
            for i, flags in enumerate(args.ctxpar_variants):
                results += run_ctxpar(args, levels, flags, ctxpar_tag(flags, args.ctxpar_variants),
                                      "ctxpar-serve.log" if i == 0 else f"ctxpar-serve-{i}.log")
        elif peer == "llama":
            if args.llama_bin is None:
                args.llama_bin = subprocess.check_output(
                    ["bash", os.path.join(ROOT, "bench/llama_cpp/build.sh")],
                    text=True).split()[-1]
            results += run_llama(args, levels)
        else:
            results += run_vllm(args, levels)
    cpu = f"{cpu_name()}, {os.cpu_count()} cores"
    meta = {"cpu": cpu, "load_average": os.getloadavg(), "llama_omp_wait": args.llama_omp_wait,
            "model": os.path.basename(args.model), "max_tokens": args.max_tokens,
            "prompt_words": args.prompt_words, "ctxpar_flags": args.ctxpar_flags,
            "peers": args.peers, "command": shlex.join(sys.argv)}
    if len(args.ctxpar_variants) > 1:
        meta["ctxpar_variants"] = args.ctxpar_variants
    if "vllm" in args.peers:
        meta["load_average_before"] = load_before
        meta["vllm"] = {"python": args.vllm_python, "model": args.vllm_model,
                        "served_name": args.vllm_served_name, "dtype": args.vllm_dtype,
                        "kv_cache_gib": args.vllm_kv_gib, "version": args.vllm_version,
                        "max_model_len": args.vllm_max_model_len,
                        "reserved_cpus": args.vllm_reserved_cpus, "env": vllm_peer.command(
                            args, 0, max(levels))[1]}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2)
    md = table(results)
    head = f"{cpu}; {meta['model']}; {args.max_tokens} new tokens, streamed"
    if "vllm" in args.peers:
        head += (f"; vLLM {args.vllm_version} serves {os.path.basename(args.vllm_model)} "
                 f"({args.vllm_dtype}, dequantized from the GGUF)")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(head + "\n\n" + md)
    plot(results, os.path.join(args.out, "serve.png"),
         f"{meta['model']}, {args.max_tokens} new tokens, {cpu}")
    print(md)


def main_prefix(args):
    if not args.skip_llama and args.llama_bin is None:
        args.llama_bin = subprocess.check_output(
            ["bash", os.path.join(ROOT, "bench/llama_cpp/build.sh")], text=True).split()[-1]
    load_before = os.getloadavg()
    summaries, raw, small = run_prefix(args)
    cpu = f"{cpu_name()}, {os.cpu_count()} cores"
    meta = {"cpu": cpu, "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "model": os.path.basename(args.model), "max_tokens": args.max_tokens,
            "groups": args.groups, "prompts_per_group": args.prompts_per_group,
            "system_words": args.system_words, "question_words": args.question_words,
            "prefix_concurrency": args.prefix_concurrency, "users": args.users,
            "turns": args.turns, "ctxpar_flags": args.ctxpar_flags,
            "command": " ".join(sys.argv)}
    with open(os.path.join(args.out, "prefix.json"), "w") as f:
        json.dump({"meta": meta, "summaries": summaries, "small_pool": small, "raw": raw}, f,
                  indent=2)
    md = prefix_table(summaries, small)
    head = (f"{cpu}; {meta['model']}; load average {load_before[0]:.1f} before, "
            f"{meta['load_average_after'][0]:.1f} after; shared prefix: {args.groups} groups x "
            f"{args.prompts_per_group} prompts, {args.system_words}-word system prompts, "
            f"{args.question_words}-word questions, concurrency {args.prefix_concurrency}; "
            f"multi-turn: {args.users} users x {args.turns} turns; {args.max_tokens} new tokens\n\n")
    with open(os.path.join(args.out, "prefix.md"), "w") as f:
        f.write(head + md)
    prefix_plot(summaries, os.path.join(args.out, "prefix.png"), f"{meta['model']}, {cpu}")
    print(head + md)


if __name__ == "__main__":
    main()
