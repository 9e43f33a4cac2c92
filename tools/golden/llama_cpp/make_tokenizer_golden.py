#!/usr/bin/env python3
"""Writes tests/data/tokenizer/golden.json: token ids of llama.cpp for ~50 texts, and the
chat template rendered by jinja2, for SmolLM2-135M-Instruct.Q4_1.gguf.

llama.cpp (through llama-cpp-python, built from source on this machine) tokenizes with the
GGUF's own vocabulary, merges and pre-tokenizer; nobody on ctxpar wrote it. jinja2 renders the
GGUF's tokenizer.chat_template as HF transformers does (trim_blocks, lstrip_blocks).

    python3 -m venv /root/.cache/ctxpar/venv
    CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL=2 \\
        /root/.cache/ctxpar/venv/bin/pip install llama-cpp-python jinja2 gguf
    /root/.cache/ctxpar/venv/bin/python tools/golden/llama_cpp/make_tokenizer_golden.py \\
        "$(bash scripts/fetch-model.sh)" > tests/data/tokenizer/golden.json
"""
import pathlib
import random
import sys

import gguf
import jinja2
import llama_cpp

from versions import dump_compact, llama_cpp_versions

LONG_TEXT = (
    "Context parallelism shards the KV cache of one sequence across the ranks of a group. "
    "Each rank computes attention over its shard; the partial outputs, with their log-sum-exp, "
    "are merged exactly.\n\n"
    "    def merge(o1, lse1, o2, lse2):\n"
    "        m = max(lse1, lse2)\n"
    "        return (o1 * exp(lse1 - m) + o2 * exp(lse2 - m)) / (exp(lse1 - m) + exp(lse2 - m))\n\n"
    "Measured on 2 cores: 1,234.5 tokens/s (prefill) and 98.76 tokens/s (decode); "
    "that's 12.5x llama.cpp's number -- or isn't it? Les résultats français, die Ergebnisse, "
    "结果 and 結果 all agree. 🚀✨\n"
) * 4

# (name, text, parse_special). A text given as bytes may be invalid UTF-8.
CASES = [
    ("empty", "", False),
    ("one_letter", "a", False),
    ("hello", "Hello world", False),
    ("sentence", "The quick brown fox jumps over the lazy dog.", False),
    ("leading_space", " leading space", False),
    ("trailing_space", "trailing space ", False),
    ("contractions", "I'm sure you've seen it; we'll see, they'd say it's John's.", False),
    ("contractions_upper", "I'M SURE YOU'VE SEEN IT; IT'S JOHN'S.", False),
    ("quotes", "'quoted' \"double\" `back` 'll 're", False),
    ("punctuation", "Hello, world! How are you? (fine) [ok] {yes} <no> ...;:", False),
    ("punct_runs", "!!!??? ... --- *** ### @@@ $$$ %%%", False),
    ("digits", "0123456789", False),
    ("digit_runs", "In 2024 we sold 1234567 units at $19.99 (+3.5%) on 12/31.", False),
    ("space_digits", "a 1 2  3   4", False),
    ("phone", "+1 (555) 010-9999 ext. 42", False),
    ("spaces_2", "two  spaces", False),
    ("spaces_many", "many          spaces   between", False),
    ("spaces_only", "     ", False),
    ("tabs", "\tindented\t\ttabs\t", False),
    ("newlines", "line one\nline two\n\nline four\n", False),
    ("crlf", "windows\r\nline\r\n", False),
    ("newline_runs", "\n\n\n\nend", False),
    ("mixed_ws", " \t \n \r\n  x  \n", False),
    ("python", "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n", False),
    ("cpp", "int main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n}\n",
     False),
    ("json", '{"key": [1, 2.5, null], "nested": {"a": true}}', False),
    ("url", "https://example.com/path?query=1&b=two#frag", False),
    ("accents", "Café, naïve, façade, résumé, Ångström, Ærø, São Paulo, Dvořák", False),
    ("german", "Straße, Größe, Übermäßig, Fußgängerübergänge", False),
    ("greek_cyrillic", "Καλημέρα κόσμε. Привет, мир! Ёжик", False),
    ("cjk_chinese", "你好，世界！我们今天学习中文。", False),
    ("cjk_japanese", "こんにちは世界。カタカナとひらがな、漢字。", False),
    ("cjk_korean", "안녕하세요 세계", False),
    ("arabic_hebrew", "مرحبا بالعالم שלום עולם", False),
    ("hindi", "नमस्ते दुनिया", False),
    ("emoji", "I love 🍕 and 🐍! 👍🏽 👨‍👩‍👧 🇫🇷", False),
    ("symbols", "© ® ™ € £ ¥ § ¶ • … → ← ≤ ≥ ≠ ∞ √ π µ", False),
    ("math", "E = mc² and x₁ + x₂ = ½ or ¾; Ⅻ", False),
    ("fullwidth_digits", "Ｔｏｋｙｏ ２０２４ and ٣٤٥ and ४२", False),
    ("nbsp_ideographic", "non\u00a0breaking and\u3000ideographic and\u2009thin", False),
    ("zero_width", "zero\u200bwidth\u200djoiner\ufeffbom", False),
    ("control_chars", "bell\x07 escape\x1b[0m null\x00 del\x7f", False),
    ("bytes_without_token", "x\x04y\x06 \x13\x14\x16\x1d z", False),
    ("special_as_text", "<|im_start|>user\nhi<|im_end|>", False),
    ("special_parsed", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", True),
    ("special_adjacent", "<|endoftext|><|im_start|><|im_end|>x<|endoftext|>", True),
    ("special_in_words", "before<|im_end|>after <|endoftext|> <repo_name>name<reponame>", True),
    ("special_partial", "<|im_start and <|im_end| and <|endoftext>", True),
    ("invalid_utf8", b"ok \xff\xfe bad \xc3 cut \xe4\xb8 end \xf0\x9f\x98", False),
    ("long_text", LONG_TEXT, False),
]

# Seeded random strings over many scripts and planes (letters, numbers, marks, symbols, spaces,
# emoji, CJK, math alphanumerics, tags), to probe the Unicode class table beyond the texts above.
RANDOM_POOLS = [range(0x20, 0x7F), range(0xA0, 0x250), range(0x300, 0x3FF), range(0x400, 0x4FF),
                range(0x600, 0x6FF), range(0x900, 0x97F), range(0x2000, 0x206F),
                range(0x3000, 0x30FF), range(0x4E00, 0x4F00), range(0xAC00, 0xAC80),
                range(0x1F300, 0x1F6FF), range(0xFF00, 0xFFEF), range(0x10000, 0x10200),
                range(0x1D400, 0x1D7FF), range(0x20000, 0x20100), range(0xE0000, 0xE0080),
                [0x20, 0x20, 0x0A, 0x09, 0x27, 0x30, 0x31]]


def random_cases(count: int, seed: int):
    rng = random.Random(seed)
    for i in range(count):
        cps = [rng.choice(rng.choice(RANDOM_POOLS)) for _ in range(rng.randint(8, 40))]
        yield (f"random_{i:02d}", "".join(map(chr, cps)).replace("'", "'s"), False)


CASES += list(random_cases(16, seed=20261130))

CHATS = [
    ("user_only", [{"role": "user", "content": "What is the capital of France?"}], True),
    ("with_system", [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "Hi!"}], True),
    ("multi_turn", [{"role": "user", "content": "Count to three."},
                    {"role": "assistant", "content": "1, 2, 3."},
                    {"role": "user", "content": "Now backwards,\nplease."}], True),
    ("no_generation_prompt", [{"role": "user", "content": "Hello"},
                              {"role": "assistant", "content": "Hi there!"}], False),
    ("assistant_first", [{"role": "assistant", "content": "I start."}], True),
    ("unicode", [{"role": "user", "content": "Traduis « bonjour » en 中文 🙂"}], True),
    ("empty_content", [{"role": "user", "content": ""}], True),
    ("empty", [], True),
]


def render_chat(template: str, messages, add_generation_prompt: bool) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages,
                                            add_generation_prompt=add_generation_prompt)


def main() -> None:
    model_path = sys.argv[1]
    reader = gguf.GGUFReader(model_path)
    template = reader.fields["tokenizer.chat_template"].contents()
    llm = llama_cpp.Llama(model_path, vocab_only=True, verbose=False)

    def tokenize(data: bytes, special: bool):
        return llm.tokenize(data, add_bos=True, special=special)

    cases = []
    for name, text, special in CASES:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        ids = tokenize(data, special)
        case = {"name": name, "parse_special": special, "ids": ids,
                "detokenized_hex": llm.detokenize(ids, special=special).hex()}
        if isinstance(text, bytes):
            case["text_hex"] = data.hex()
        else:
            case["text"] = text
        cases.append(case)

    chats = []
    for name, messages, add_gen in CHATS:
        rendered = render_chat(template, messages, add_gen)
        chats.append({"name": name, "messages": messages, "add_generation_prompt": add_gen,
                      "rendered": rendered, "ids": tokenize(rendered.encode("utf-8"), True)})

    out = {
        "generator": "tools/golden/llama_cpp/make_tokenizer_golden.py",
        "model": pathlib.Path(model_path).name,
        "reference": llama_cpp_versions(),
        "jinja2": jinja2.__version__,
        "tokenize_call": "Llama(model, vocab_only=True).tokenize(text, add_bos=True, "
                         "special=parse_special)",
        "cases": cases,
        "chat": chats,
    }
    dump_compact(out, sys.stdout)


if __name__ == "__main__":
    main()
