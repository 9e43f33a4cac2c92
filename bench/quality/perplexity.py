"""Quality of `--dtype auto` (int8 on the matrix units) beside `--dtype float32` and llama.cpp.

The negative log-likelihood per token of held-out text, scored the way llama.cpp's
llama-perplexity scores it: the text tokenized once (with the model's BOS), cut into chunks of
--ctx tokens, each chunk's first token replaced by BOS where the model adds one, and the tokens
of its second half scored (positions ctx / 2 + 1 .. ctx - 1, each given all before it in the
chunk). ctxpar is asked through its server, `POST /v1/completions` with the chunk's token ids,
`echo` and `logprobs` (the prompt's log-probabilities), once per --dtype; llama-perplexity runs
on the same file and text (-c ctx -b ctx --chunks N); with --hf-python, HF transformers in
float32 on the weights it dequantizes from the same GGUF scores the same chunks (hf_nll.py), the
outside reference. Prints a markdown table: NLL, perplexity and each one's difference from
float32, from transformers and from llama.cpp.

The default text is this repository's docs/*.md in name order: prose written after these models
were trained, so held out from them. The script needs `requests` (bench/serve's environment);
--hf-python another environment, made once with `python3 -m venv VENV && VENV/bin/pip install
torch transformers gguf accelerate`.

    python bench/quality/perplexity.py --model $(bash scripts/fetch-model.sh | tail -1)
    python bench/quality/perplexity.py --model ... --ctx 512 --chunks 8 --dtypes float32,auto \\
        --text a.txt --text b.txt --hf-python /path/to/venv/bin/python
"""

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "serve"))
from run import Process, cpu_name, free_port  # noqa: E402


# The server tokenizes at most the bytes its context can hold (CTXPAR-HTTP-004: 81 bytes a token,
# 663,552 for SmolLM2's 8192); the docs outgrew that, so longer text is cut at a paragraph break
# below this, for llama.cpp too (both score the same text). 600 KB is some 150k tokens of prose.
MAX_TEXT_BYTES = 600_000


def read_text(paths):
    parts = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            parts.append(f.read())
    text = "\n\n".join(parts)
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        cut = text.encode("utf-8")[:MAX_TEXT_BYTES].decode("utf-8", errors="ignore")
        text = cut[:cut.rfind("\n\n")]
        print(f"text cut to its first {len(text.encode('utf-8'))} bytes (the server's limit)",
              file=sys.stderr)
    return text


def tokenize(url, text):
    r = requests.post(url + "/tokenize", json={"prompt": text, "add_special_tokens": True},
                      timeout=600)
    r.raise_for_status()
    return r.json()["tokens"]


def bos_of(url, text):
    """The BOS id the server adds, or None: the first token of the text with and without it."""
    r = requests.post(url + "/tokenize", json={"prompt": text, "add_special_tokens": False},
                      timeout=600)
    r.raise_for_status()
    plain = r.json()["tokens"]
    special = tokenize(url, text)
    return special[0] if len(special) == len(plain) + 1 else None


def llama_tokens(args, text_path):
    """llama-tokenize's ids of the file as llama-perplexity reads it (BOS where the model adds
    one, special tokens as text, no escapes; the file ends without a newline, which common's -f
    would drop)."""
    out = subprocess.run([os.path.join(args.llama_bin, "llama-tokenize"), "-m", args.model, "-f",
                          text_path, "--ids", "--no-escape", "--log-disable"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def chunk_nll(url, ids, first):
    """Sum of -log p over positions first + 1 .. len(ids) - 1 of one chunk, and their count."""
    body = {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0}
    r = requests.post(url + "/v1/completions", json=body, timeout=3600)
    r.raise_for_status()
    lp = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    scored = lp[first + 1:len(ids)]
    if any(v is None for v in scored):
        raise RuntimeError("a prompt position without a log-probability")
    return -sum(scored), len(scored)


def ctxpar_nll(args, dtype, text, log_dir, given):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [args.ctxpar, "serve", "--model-path", args.model, "--port", str(port),
           "--dtype", dtype]
    server = Process(cmd, url, os.path.join(log_dir, f"ctxpar-{dtype}.log"))
    try:
        own = tokenize(url, text)
        tokens = given if given is not None else own
        bos = bos_of(url, text)
        n_chunk = min(args.chunks, len(tokens) // args.ctx) if args.chunks > 0 else \
            len(tokens) // args.ctx
        if n_chunk < 1:
            raise RuntimeError(f"the text is {len(tokens)} tokens, less than one chunk of {args.ctx}")
        first = args.ctx // 2
        nll, count = 0.0, 0
        chunks = []
        for c in range(n_chunk):
            ids = list(tokens[c * args.ctx:(c + 1) * args.ctx])
            if bos is not None:
                ids[0] = bos
            chunks.append(ids)
            s, n = chunk_nll(url, ids, first)
            nll += s
            count += n
            print(f"  ctxpar {dtype}: chunk {c + 1}/{n_chunk}, running NLL {nll / count:.5f}",
                  file=sys.stderr)
        agree = given is None or own == given
        return {"nll": nll / count, "tokens": count, "chunks": n_chunk, "text_tokens": len(tokens),
                "tokenizations_equal": agree, "chunk_ids": chunks}
    finally:
        server.stop()


def llama_nll(args, text_path, n_chunk):
    cmd = [os.path.join(args.llama_bin, "llama-perplexity"), "-m", args.model, "-f", text_path,
           "-c", str(args.ctx), "-b", str(args.ctx), "--chunks", str(n_chunk),
           "-t", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", log)
    if m is None:
        raise RuntimeError("llama-perplexity printed no estimate:\n" + log[-2000:])
    ppl = float(m.group(1))
    return {"nll": math.log(ppl), "tokens": n_chunk * (args.ctx - args.ctx // 2 - 1),
            "chunks": n_chunk}


def hf_nll(args, chunk_ids, log_dir):
    job = os.path.join(log_dir, "hf-job.json")
    with open(job, "w", encoding="utf-8") as f:
        json.dump({"model": os.path.abspath(args.model), "chunks": chunk_ids,
                   "first": args.ctx // 2}, f)
    out = subprocess.run([args.hf_python, os.path.join(HERE, "hf_nll.py"), job],
                         stdout=subprocess.PIPE, text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"nll": r["nll"] / r["tokens"], "tokens": r["tokens"], "chunks": len(chunk_ids)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a GGUF file")
    p.add_argument("--ctxpar", default=os.path.join(ROOT, "build", "default", "cli", "ctxpar"))
    p.add_argument("--llama-bin", default=None,
                   help="llama.cpp's binaries (default: bench/llama_cpp/build.sh's; '' skips it)")
    p.add_argument("--text", action="append", help="text files (default: docs/*.md)")
    p.add_argument("--ctx", type=int, default=512, help="tokens per chunk")
    p.add_argument("--chunks", type=int, default=0, help="chunks scored (0: all the text holds)")
    p.add_argument("--dtypes", default="float32,auto")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--hf-python", default=None,
                   help="a Python with torch, transformers, gguf and accelerate: adds "
                        "transformers' float32 NLL of the same chunks (default: skipped)")
    args = p.parse_args()
    if args.llama_bin is None:
        args.llama_bin = subprocess.run(["bash", os.path.join(ROOT, "bench", "llama_cpp",
                                                              "build.sh")],
                                        capture_output=True, text=True,
                                        check=True).stdout.strip().splitlines()[-1]
    paths = args.text or sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    text = read_text(paths).rstrip("\n")
    log_dir = tempfile.mkdtemp(prefix="ctxpar-quality-")
    text_path = os.path.join(log_dir, "text.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)

    # Both engines score the same ids: llama.cpp's where it runs (ctxpar's own tokenization is
    # compared with them and the agreement printed).
    given = llama_tokens(args, text_path) if args.llama_bin else None
    results = {}
    for dtype in args.dtypes.split(","):
        results[f"ctxpar --dtype {dtype}"] = ctxpar_nll(args, dtype, text, log_dir, given)
    chunks = next(iter(results.values()))["chunks"]
    if args.hf_python:
        results["transformers float32"] = hf_nll(
            args, next(iter(results.values()))["chunk_ids"], log_dir)
    if args.llama_bin:
        results["llama-perplexity"] = llama_nll(args, text_path, chunks)

    base = results.get("ctxpar --dtype float32")
    ref = results.get("transformers float32")
    peer = results.get("llama-perplexity")
    print(f"Model {os.path.basename(args.model)}; text: {len(paths)} file(s), "
          f"{next(iter(results.values())).get('text_tokens', '?')} tokens; {chunks} chunks of "
          f"{args.ctx}, the second half of each scored; CPU {cpu_name()}")
    if given is not None:
        same = all(r.get("tokenizations_equal", True) for r in results.values())
        print(f"ctxpar's tokenization of the text equals llama-tokenize's: {same}\n")
    print("| engine | NLL / token | perplexity | NLL vs float32 | NLL vs transformers "
          "| PPL vs llama.cpp |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        vs_base = f"{100 * (r['nll'] / base['nll'] - 1):+.3f} %" if base else "-"
        vs_ref = f"{100 * (r['nll'] / ref['nll'] - 1):+.3f} %" if ref else "-"
        vs_peer = f"{100 * (math.exp(r['nll']) / math.exp(peer['nll']) - 1):+.3f} %" \
            if peer else "-"
        print(f"| {name} | {r['nll']:.5f} | {math.exp(r['nll']):.4f} | {vs_base} | {vs_ref} "
              f"| {vs_peer} |")


if __name__ == "__main__":
    main()
