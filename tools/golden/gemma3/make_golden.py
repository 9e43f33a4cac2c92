#!/usr/bin/env python3
"""Writes tests/data/gemma3/golden.json: what HF transformers computes in float32 for Gemma 3 270M
on weights dequantized from gemma-3-270m-q4_k_m.gguf, for comparing ctxpar's Gemma 3 forward.

transformers reads the GGUF itself (gguf-py dequantizes every block type to float32; the norm
weights, stored by llama.cpp's converter as 1 + w, go back to w for Gemma3RMSNorm's (1 + w)).
Eager attention, so the sliding-window layers use the exact mask (key visible when
q_pos - k_pos < sliding_window).

Prompts: one of 8 tokens and one of about 700 (longer than the 512-token window), tokenized by
transformers' tokenizer built from the file (add BOS). For each: the prompt ids, the top-K
(id, logit) at a few positions (before and after the window's edge for the long one), and the
greedy continuation of N_NEW tokens (generate with its KV cache, not stopping at end-of-turn)
with the top-1 minus top-2 margin at each step (a forward whose logits differ by more than half a
margin may pick another token there).

    python3 -m venv /tmp/gemma-venv && /tmp/gemma-venv/bin/pip install torch transformers gguf \\
        numpy sentencepiece
    /tmp/gemma-venv/bin/python tools/golden/gemma3/make_golden.py \\
        ~/.cache/ctxpar/models/gemma-3-270m-q4_k_m.gguf tests/data/gemma3
"""
import hashlib
import importlib.metadata
import json
import pathlib
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

N_NEW = 12
TOP_K = 10

SHORT = "The capital of France is"
LONG = (
    "The history of computing is a story of abstraction. Early machines were programmed by "
    "rewiring panels and flipping switches; each new problem meant a new physical "
    "configuration. Stored-program computers changed that: instructions became data, kept in "
    "the same memory as the numbers they operated on. Assembly languages gave names to "
    "machine instructions, and compilers translated higher-level languages such as FORTRAN "
    "and COBOL into those instructions, so that scientists and businesses could describe what "
    "they wanted rather than how the hardware should do it. Operating systems then hid the "
    "details of disks, terminals and memory behind files, processes and virtual addresses. "
    "Networks connected the machines, and the web turned them into a single, global library. "
)
LONG_QUESTIONS = (
    "Question {i}: which layer did the paragraph above describe as number {i}, and why did it "
    "matter to the engineers who built the machines of that decade? "
)
LONG_TOKENS = 700


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def top(logits: torch.Tensor) -> list:
    v, i = torch.topk(logits, TOP_K)
    return [[int(a), round(float(b), 5)] for a, b in zip(i, v)]


def run(model, ids: list, positions: list) -> dict:
    with torch.no_grad():
        # The head only at the wanted positions: 262,144 logits for every position of a long
        # prompt would cost more than the rest of the forward.
        hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
        logits = model.lm_head(hidden[positions])
        out = {"prompt_ids": ids,
               "top": [{"position": p, "top": top(logits[i])} for i, p in enumerate(positions)]}
        gen = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=N_NEW,
                             min_new_tokens=N_NEW, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        greedy, margins = [], []
        for step in gen.logits:
            v, i = torch.topk(step[0], 2)
            greedy.append(int(i[0]))
            margins.append(round(float(v[0] - v[1]), 5))
        assert greedy == gen.sequences[0, len(ids):].tolist()
        out["greedy"] = greedy
        out["margins"] = margins
    return out


def main() -> None:
    path = pathlib.Path(sys.argv[1]).expanduser().resolve()
    out_dir = pathlib.Path(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    cfg = model.config
    short = tok(SHORT).input_ids
    text = LONG
    i = 1
    while len(tok(text).input_ids) < LONG_TOKENS:
        text += LONG_QUESTIONS.format(i=i)
        i += 1
    long = tok(text).input_ids[:LONG_TOKENS]
    n = len(short)
    golden = {
        "generator": "tools/golden/gemma3/make_golden.py",
        "model": path.name,
        "model_sha256": sha256(path),
        "reference": {
            "transformers": importlib.metadata.version("transformers"),
            "torch": importlib.metadata.version("torch"),
            "gguf": importlib.metadata.version("gguf"),
            "dtype": "float32",
            "attn_implementation": "eager",
        },
        "config": {
            "layer_types": cfg.layer_types,
            "sliding_window": cfg.sliding_window,
            "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
            "rope_parameters": cfg.rope_parameters,
            "hidden_activation": cfg.hidden_activation,
        },
        "settings": {"n_new": N_NEW, "top_k": TOP_K,
                     "greedy": "argmax of the last position over the prompt plus the tokens so far"},
        "prompts": [
            dict(name="short", text=SHORT, **run(model, short, [0, n // 2, n - 1])),
            dict(name="long", text=text,
                 **run(model, long, [100, 511, 512, 600, LONG_TOKENS - 1])),
        ],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "golden.json", "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
