#!/usr/bin/env python3
"""Writes tests/data/llama_cpp/golden.json and golden_f32_weights.json: what llama.cpp
computes for SmolLM2-135M-Instruct.Q4_1.gguf on a few prompts, for comparing ctxpar's Llama
forward.

For each prompt: the prompt token ids, the greedy continuation of 48 tokens (argmax of the
logits, lowest id on ties, not stopping at end-of-generation tokens; eog_at gives the first one),
the top-1 minus top-2 logit at each greedy step (margins: a forward whose logits differ by more
than half a margin may pick another token there), and the top-5 (id, logit) of the last prompt
position and of the first 8 generated positions.

llama.cpp runs as exactly as it can: fp32 K/V cache (its default fp16 cache moves logits by up
to a few tenths), no flash attention, fixed thread count, the whole prompt in one batch.
- golden.json: the GGUF file as it is. llama.cpp's CPU kernels quantize the activations to int8
  per 32-block (Q8_1 for the Q4_1 layers, Q8_0 for the Q8_0 lm_head) before every matmul.
- golden_f32_weights.json: the same weights dequantized to an F32 GGUF (gguf-py's dequantize,
  exact for Q4_1 / Q8_0 up to the fp32 rounding of d * q + m), so llama.cpp multiplies them by
  fp32 activations: the numerics of ctxpar's default forward.

    /root/.cache/ctxpar/venv/bin/python tools/golden/llama_cpp/make_model_golden.py \\
        "$(bash scripts/fetch-model.sh)" tests/data/llama_cpp
(venv as in make_tokenizer_golden.py; the F32 copy, 540 MB, goes to a temporary directory)
"""
import hashlib
import importlib.metadata
import pathlib
import sys
import tempfile

import gguf
import jinja2
import llama_cpp
import numpy as np

from versions import dump_compact, llama_cpp_versions

N_NEW = 48
N_TOP_STEPS = 8  # generated positions whose top-5 is recorded, after the last prompt position
TOP_K = 5
N_THREADS = 2
N_CTX = 1024
N_BATCH = 512

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
    # Added with the F32-weights golden, before either was generated.
    ("chat_sky", [{"role": "user", "content": "Why is the sky blue?"}], True),
    ("plain_story", "Once upon a time, in a small village by the mountains,", False),
]


def top_k(logits: np.ndarray) -> list:
    # Stable sort on -logit: equal logits keep the lowest id first.
    order = np.argsort(-logits, kind="stable")[:TOP_K]
    return [[int(i), round(float(logits[i]), 5)] for i in order]


def write_f32_copy(src: str, dst: pathlib.Path) -> None:
    """The GGUF at src with every tensor dequantized to F32, metadata unchanged but file_type."""
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in (gguf.Keys.General.ARCHITECTURE,
                                                             gguf.Keys.General.FILE_TYPE):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub_type)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run_prompts(model_path: str, template: str) -> list:
    llm = llama_cpp.Llama(model_path, n_ctx=N_CTX, n_batch=N_BATCH, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True, seed=0, verbose=False,
                          flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                          type_v=llama_cpp.GGML_TYPE_F32)
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
    return out_prompts


def main() -> None:
    model_path, out_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    template = gguf.GGUFReader(model_path).fields["tokenizer.chat_template"].contents()
    sha256 = hashlib.sha256(pathlib.Path(model_path).read_bytes()).hexdigest()
    settings = {"n_threads": N_THREADS, "n_ctx": N_CTX, "n_batch": N_BATCH, "logits_all": True,
                "type_k": "f32", "type_v": "f32", "flash_attn": False, "temperature": 0,
                "n_new": N_NEW, "top_k": TOP_K,
                "top5_positions": "last prompt position, then generated 1.." + str(N_TOP_STEPS),
                "tokenize": "special=True for chat prompts, no BOS (add_bos_token false)"}
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = pathlib.Path(tmp) / "SmolLM2-135M-Instruct.F32.gguf"
        write_f32_copy(model_path, f32_path)
        runs = [("golden.json", model_path, "as in the file (Q4_1 layers, Q8_0 token_embd)"),
                ("golden_f32_weights.json", str(f32_path),
                 "dequantized to F32 by gguf-py " + importlib.metadata.version("gguf"))]
        for file_name, path, weights in runs:
            with open(out_dir / file_name, "w", encoding="utf-8") as out:
                dump_compact({
                    "generator": "tools/golden/llama_cpp/make_model_golden.py",
                    "command": "python tools/golden/llama_cpp/make_model_golden.py "
                               "SmolLM2-135M-Instruct.Q4_1.gguf tests/data/llama_cpp",
                    "model": pathlib.Path(model_path).name,
                    "model_sha256": sha256,
                    "weights": weights,
                    "reference": llama_cpp_versions(),
                    "settings": settings,
                    "prompts": run_prompts(path, template),
                }, out)


if __name__ == "__main__":
    main()
