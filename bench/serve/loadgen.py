"""One load generator for OpenAI-compatible servers (ctxpar serve, llama.cpp's llama-server).

Sends the same seeded prompts as streamed POST /v1/completions requests over raw HTTP (aiohttp),
either at a fixed concurrency (closed loop: C requests in flight until N are done) or as an
open-loop Poisson arrival (rate R requests/s), and measures per request:
  TTFT  time from sending to the first token,
  ITL   gaps between consecutive token chunks,
  TPOT  (E2E - TTFT) / (output tokens - 1),
  E2E   time from sending to [DONE].
It checks that every stream is well formed: "data: " frames of JSON, one id for the whole stream,
a finish_reason on the last choice chunk, the usage chunk when asked, then "data: [DONE]".

    python bench/serve/loadgen.py --url http://127.0.0.1:30000 --concurrency 4 --requests 8
    python bench/serve/loadgen.py --url ... --rate 0.5 --requests 16 --json out.json

It also makes the repetitive ledgers that run.py --workload spec sends, and the prefix-cache traces that run.py --workload prefix sends: SGLang bench_serving's
generated-shared-prefix (groups of prompts sharing a long system prompt) and multi-turn
conversations (each turn resends the history with the answers).
"""

import argparse
import asyncio
import json
import random
import statistics
import time

import aiohttp

WORDS = (
    "the of and to in is was for on that with as by at from his her an which are were this "
    "be it has had have not but also they their one two three first new after time year city "
    "river music school people war world team game film state house company series album song "
    "north south east west island village station church university century population family "
    "government party election league season record player group member art history science"
).split()


def make_prompts(count, words, seed):
    """Deterministic prompts of `words` words (SmolLM2: one token a word, 7 more)."""
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        body = " ".join(rng.choice(WORDS) for _ in range(words))
        prompts.append(f"Document {i}: {body}\nSummary:")
    return prompts


def make_ledgers(count, rows, seed):
    """Repetitive prompts for speculative decoding (run.py --workload spec): ledgers of `rows`
    deliveries, one a line in a fixed shape, ending where the next line starts. A model continues
    them line by line, repeating what the prompt and its own output already hold; each prompt
    draws its own warehouses, goods and clerks."""
    rng = random.Random(seed)
    goods = ["apples", "pears", "plums", "cherries", "lemons", "oranges", "melons", "grapes"]
    clerks = ["J. Smith", "M. Jones", "A. Brown", "K. Lee", "R. Patel", "S. Garcia"]
    prompts = []
    for i in range(count):
        month = rng.randrange(1, 13)
        lines = [f"Deliveries ledger {i}, 2024-{month:02d}"]
        for day in range(1, rows + 1):
            lines.append(f"2024-{month:02d}-{day:02d} | Warehouse {rng.choice('ABCD')} | "
                         f"{rng.randrange(2, 30)} crates of {rng.choice(goods)} | received by "
                         f"{rng.choice(clerks)} | status: complete")
        lines.append(f"2024-{month:02d}-{rows + 1:02d} |")
        prompts.append("\n".join(lines))
    return prompts


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_shared_prefix(groups, prompts_per_group, system_words, question_words, seed):
    """SGLang bench_serving's generated-shared-prefix shape: `groups` system prompts of
    `system_words` words, each followed by `prompts_per_group` questions of `question_words`
    words. Returns (group, index in group, prompt), request k of every group before request
    k + 1 of any."""
    rng = random.Random(seed)
    systems = [f"System {g}: {words(rng, system_words)}\n" for g in range(groups)]
    out = []
    for k in range(prompts_per_group):
        for g in range(groups):
            out.append((g, k, f"{systems[g]}Question {k}: {words(rng, question_words)}\nAnswer:"))
    return out


async def run_shared_prefix(url, model, trace, max_tokens, concurrency):
    """The trace in two phases: the first request of every group (its system prompt is new), then
    the others at a fixed concurrency, whose system prompt a prefix cache now holds. Returns the
    summary over both phases with per-request records."""
    timeout = aiohttp.ClientTimeout(total=3600)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    records, errors = [], []
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def phase(requests, workers):
            queue = list(requests)

            async def worker():
                while queue:
                    group, index, prompt = queue.pop(0)
                    try:
                        r = await one_request(session, url, model, prompt, max_tokens)
                        r.update(group=group, index=index)
                        records.append(r)
                    except Exception as e:
                        errors.append(f"{type(e).__name__}: {e}")

            await asyncio.gather(*(worker() for _ in range(workers)))

        start = time.perf_counter()
        firsts = [t for t in trace if t[1] == 0]
        await phase(firsts, min(concurrency, len(firsts)))
        await phase([t for t in trace if t[1] > 0], concurrency)
        wall = time.perf_counter() - start
    out = summarize(records, errors, wall, concurrency, None)
    out["records"] = [{k: r[k] for k in ("group", "index", "ttft", "e2e", "tokens",
                                         "prompt_tokens", "cached_tokens")} for r in records]
    return out


async def run_multi_turn(url, model, users, turns, system_words, question_words, max_tokens,
                         seed):
    """`users` conversations at once, each `turns` turns in sequence; every turn resends the
    whole history (system prompt, earlier questions and answers) with a new question."""
    rng = random.Random(seed)
    timeout = aiohttp.ClientTimeout(total=3600)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    records, errors = [], []
    plans = [(f"Conversation {u}: {words(rng, system_words)}\n",
              [words(rng, question_words) for _ in range(turns)]) for u in range(users)]
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def user(u):
            history, questions = plans[u]
            for t, q in enumerate(questions):
                prompt = f"{history}User: {q}\nAssistant:"
                try:
                    r = await one_request(session, url, model, prompt, max_tokens)
                except Exception as e:
                    errors.append(f"{type(e).__name__}: {e}")
                    return
                r.update(user=u, turn=t)
                records.append(r)
                history = f"{prompt}{r['text']}\n"

        start = time.perf_counter()
        await asyncio.gather(*(user(u) for u in range(users)))
        wall = time.perf_counter() - start
    out = summarize(records, errors, wall, users, None)
    out["records"] = [{k: r[k] for k in ("user", "turn", "ttft", "e2e", "tokens",
                                         "prompt_tokens", "cached_tokens")} for r in records]
    return out


def percentile(values, q):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class StreamError(Exception):
    pass


async def one_request(session, url, model, prompt, max_tokens):
    """Sends one streamed completion; returns its timings and token count."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    t0 = time.perf_counter()
    first = None
    last = None
    itl = []
    chunks_with_text = 0
    ids = set()
    text = []
    finish = None
    usage = None
    done = False
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise StreamError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        buffer = b""
        async for raw in resp.content.iter_any():
            buffer += raw
            while b"\n\n" in buffer:
                frame, buffer = buffer.split(b"\n\n", 1)
                for line in frame.split(b"\n"):
                    if not line or line.startswith(b":"):
                        continue  # SSE comment (a keep-alive)
                    if not line.startswith(b"data: "):
                        raise StreamError(f"not an SSE data line: {line[:80]!r}")
                    data = line[6:]
                    if data == b"[DONE]":
                        done = True
                        continue
                    if done:
                        raise StreamError("data after [DONE]")
                    chunk = json.loads(data)
                    ids.add(chunk.get("id"))
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices", []):
                        now = time.perf_counter()
                        if choice.get("text"):
                            text.append(choice["text"])
                            chunks_with_text += 1
                            if first is None:
                                first = now
                            else:
                                itl.append(now - last)
                            last = now
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
    end = time.perf_counter()
    if not done:
        raise StreamError("the stream ended without data: [DONE]")
    if len(ids) != 1:
        raise StreamError(f"{len(ids)} ids in one stream")
    if finish is None:
        raise StreamError("no finish_reason")
    if usage is None:
        raise StreamError("no usage chunk although stream_options.include_usage was set")
    tokens = usage.get("completion_tokens", chunks_with_text)
    if first is None:
        first = end
    ttft = first - t0
    e2e = end - t0
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else None
    details = usage.get("prompt_tokens_details") or {}
    return {"ttft": ttft, "itl": itl, "tpot": tpot, "e2e": e2e, "tokens": tokens,
            "prompt_tokens": usage.get("prompt_tokens"), "finish": finish,
            "cached_tokens": details.get("cached_tokens"), "text": "".join(text)}


async def run_load(url, model, prompts, max_tokens, concurrency=None, rate=None, seed=0,
                   lead_s=0.0):
    """Closed loop (concurrency) or Poisson arrivals (rate). lead_s > 0: in a closed loop the first
    client starts lead_s before the others, so that a server runs its first request alone and the
    others join from its next step (`ctxpar plan`'s closed-loop start), whatever the
    microseconds between the clients' first requests."""
    timeout = aiohttp.ClientTimeout(total=3600)
    # A new connection per request: llama-server closes idle keep-alive connections, which a pool
    # would reuse and fail on.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    results, errors = [], []
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def send(prompt):
            try:
                results.append(await one_request(session, url, model, prompt, max_tokens))
            except Exception as e:  # a failed request is counted, not fatal
                errors.append(f"{type(e).__name__}: {e}")

        start = time.perf_counter()
        if rate is None:
            queue = list(prompts)

            async def worker(i):
                if i > 0 and lead_s > 0:
                    await asyncio.sleep(lead_s)
                while queue:
                    await send(queue.pop(0))

            await asyncio.gather(*(worker(i) for i in range(concurrency)))
        else:
            rng = random.Random(seed)
            tasks = []
            for prompt in prompts:
                tasks.append(asyncio.create_task(send(prompt)))
                await asyncio.sleep(rng.expovariate(rate))
            await asyncio.gather(*tasks)
        wall = time.perf_counter() - start
    return summarize(results, errors, wall, concurrency, rate)


def summarize(results, errors, wall, concurrency, rate):
    def stats(values):
        values = [v for v in values if v is not None]
        return {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
                "mean": statistics.fmean(values) if values else None}

    out_tokens = sum(r["tokens"] for r in results)
    return {
        "concurrency": concurrency,
        "rate": rate,
        "requests": len(results) + len(errors),
        "completed": len(results),
        "failed": len(errors),
        "errors": errors[:5],
        "wall_s": wall,
        "request_throughput": len(results) / wall,
        "output_throughput": out_tokens / wall,
        "output_tokens": out_tokens,
        "mean_prompt_tokens": statistics.fmean(r["prompt_tokens"] or 0 for r in results)
        if results else None,
        "ttft_s": stats([r["ttft"] for r in results]),
        "itl_s": stats([x for r in results for x in r["itl"]]),
        "tpot_s": stats([r["tpot"] for r in results]),
        "e2e_s": stats([r["e2e"] for r in results]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--model", default=None, help="the model field (default: none sent)")
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--rate", type=float, default=None, help="Poisson arrivals per second")
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--prompt-words", type=int, default=513)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the summary here too")
    a = p.parse_args()
    if (a.concurrency is None) == (a.rate is None):
        p.error("give exactly one of --concurrency and --rate")
    if a.concurrency is not None and a.concurrency < 1:
        p.error("--concurrency must be at least 1")
    if a.rate is not None and not a.rate > 0:
        p.error("--rate must be a positive number of arrivals per second")
    if a.requests < 1 or a.prompt_words < 1 or a.max_tokens < 1:
        p.error("--requests, --prompt-words and --max-tokens must be at least 1")
    prompts = make_prompts(a.requests, a.prompt_words, a.seed)
    summary = asyncio.run(run_load(a.url, a.model, prompts, a.max_tokens, a.concurrency,
                                   a.rate, a.seed))
    text = json.dumps(summary, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
