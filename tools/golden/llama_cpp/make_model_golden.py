#!/usr/bin/env python3
"""Writes tests/model/data/llama_cpp/golden.json: what llama.cpp computes for
SmolLM2-135M-Instruct.Q4_1.gguf on a few prompts, for comparing ctxpar's Llama forward.

For each prompt: the prompt token ids, the greedy continuation of 48 tokens (argmax of the
logits, lowest id on ties, not stopping at end-of-generation tokens; eog_at gives the first one),
the top-1 minus top-2 logit at each greedy step (margins: a forward whose logits differ by more
than half a margin may pick another token there), and the top-5 (id, logit) of the last prompt
position and of the first 8 generated positions.
llama.cpp runs the GGUF's Q4_1 weights with its own CPU kernels (activations quantized to 8 bits
for the quantized dot products), so logits differ from an fp32 forward by a small amount.

    /root/.cache/ctxpar/venv/bin/python tools/golden/llama_cpp/make_model_golden.py \\
        "$(bash scripts/fetch-model.sh)" > tests/model/data/llama_cpp/golden.json
(venv as in make_tokenizer_golden.py)
"""
import pathlib
import sys

import gguf
import jinja2
import llama_cpp
import numpy as np

from versions import dump_compact, llama_cpp_versions

N_NEW = 48
N_TOP_STEPS = 8  # generated positions whose top-5 is recorded, after the last prompt position
TOP_K = 5
N_THREADS = 2

LONG_PROMPT = (
    "The history of computing is a story of abstraction. Early machines were programmed by "
    "rewiring panels and flipping switches; each new problem meant a new physical "
    "configuration. Stored-program computers changed that: instructions became data, kept in "
    "the same memory as the numbers they operated on. Assembly languages gave names to "
    "machine instructions, and compilers translated higher-level languages such as FORTRAN "
    "and COBOL into those instructions, so that scientists and businesses could describe what "
    "they wanted rather than how the hardware should do it. Operating systems then hid the "
    "details of disks, terminals and memory behind files, processes and virtual addresses. "
    "Networks connected the machines, and the web turned them into a single, global library. "
    "Each layer made the one below it invisible to most people: few programmers today think "
    "about the voltage on a wire, the timing of a memory bus or the order in which a disk "
    "head visits its tracks. Yet the layers below still set the limits of what the layers "
    "above can do, and the best engineers know where those limits come from. "
    "Today, large language models add another layer: they read text and write it, and"
)

PROMPTS = [
    ("plain_france", "The capital of France is", False),
    ("plain_code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("chat_poem", [{"role": "user", "content": "Write a short poem about the sea."}], True),
    ("long_history", LONG_PROMPT, False),
]


def top_k(logits: np.ndarray) -> list:
    # Stable sort on -logit: equal logits keep the lowest id first.
    order = np.argsort(-logits, kind="stable")[:TOP_K]
    return [[int(i), round(float(logits[i]), 5)] for i in order]


def main() -> None:
    model_path = sys.argv[1]
    template = gguf.GGUFReader(model_path).fields["tokenizer.chat_template"].contents()
    llm = llama_cpp.Llama(model_path, n_ctx=1024, n_batch=512, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True, seed=0, verbose=False)
    eog = {llm.token_eos(), *[llm.tokenize(t.encode(), add_bos=False, special=True)[0]
                              for t in ("<|im_end|>", "<|endoftext|>")]}
    out_prompts = []
    for name, prompt, chat in PROMPTS:
        if chat:
            text = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
                template).render(messages=prompt, add_generation_prompt=True)
        else:
            text = prompt
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=chat)
        llm.reset()
        llm.eval(ids)
        tops = []
        margins = []
        generated = []
        for step in range(N_NEW):
            logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            best = np.sort(logits)[-2:]
            margins.append(round(float(best[1] - best[0]), 4))
            if step <= N_TOP_STEPS:
                tops.append(top_k(logits))
            nxt = int(np.argmax(logits))
            generated.append(nxt)
            llm.eval([nxt])
        eog_at = next((i for i, t in enumerate(generated) if t in eog), None)
        entry = {"name": name, "chat": chat, "prompt": text, "prompt_ids": ids,
                 "greedy_ids": generated,
                 "greedy_text": llm.detokenize(generated).decode("utf-8", errors="replace"),
                 "eog_at": eog_at,
                 "margins": margins,
                 "top5": tops}
        if chat:
            entry["messages"] = prompt
        out_prompts.append(entry)
        print(f"{name}: {len(ids)} prompt tokens, eog_at={eog_at}", file=sys.stderr)

    dump_compact({
        "generator": "tools/golden/llama_cpp/make_model_golden.py",
        "command": "python tools/golden/llama_cpp/make_model_golden.py "
                   "SmolLM2-135M-Instruct.Q4_1.gguf > tests/model/data/llama_cpp/golden.json",
        "model": pathlib.Path(model_path).name,
        "reference": llama_cpp_versions(),
        "settings": {"n_threads": N_THREADS, "n_ctx": 1024, "n_batch": 512, "logits_all": True,
                     "temperature": 0, "n_new": N_NEW, "top_k": TOP_K,
                     "top5_positions": "last prompt position, then generated 1.." +
                                       str(N_TOP_STEPS),
                     "tokenize": "special=True for chat prompts, no BOS (add_bos_token false)"},
        "prompts": out_prompts,
    }, sys.stdout)


if __name__ == "__main__":
    main()
