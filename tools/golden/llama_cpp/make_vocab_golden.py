#!/usr/bin/env python3
"""Writes tests/data/tokenizer/llama_vocab_golden.json: llama.cpp's token ids for a seeded corpus
of strings on every vocabulary-only GGUF of the llama-cpp-python sdist that ctxpar reads, beyond
the .inp / .out pairs llama.cpp ships (which tests/text/llama_vocab_test.cpp runs as they are).

Four pre-tokenizers have no vocabulary of their own in the sdist; they run on another's tokens with
tokenizer.ggml.pre rewritten, in llama.cpp here and in the test alike: "deepseek-v3" on
ggml-vocab-deepseek-llm.gguf, Mistral's "tekken" and "gpt-4o" (also Llama 4's) on
ggml-vocab-llama-bpe.gguf, and "default" is ggml-vocab-gpt-neox.gguf (it names none).

llama.cpp is the reference: tokenize_corpus.cpp (beside this file) is built against the libllama
of bench/llama_cpp/build.sh's build tree and runs llama_tokenize(add_special = false,
parse_special = false) on each string, as test-tokenizer-0 and `ctxpar tokenize` do. A second,
per-vocabulary corpus mixes up to 24 of the vocabulary's special tokens (CONTROL, UNKNOWN,
USER_DEFINED: read with the sdist's gguf-py) into the pieces, tokenized with add_special and
parse_special true, as a raw prompt is.

    bash bench/llama_cpp/build.sh        # or: cmake --build <its build tree> --target llama
    ~/.cache/ctxpar/venv/bin/python tools/golden/llama_cpp/make_vocab_golden.py \
        > tests/data/tokenizer/llama_vocab_golden.json     # the venv needs numpy (gguf-py)

Options (environment): LLAMA_CPP_SRC (the vendored llama.cpp source tree) and LLAMA_CPP_BUILD
(its build tree), by default build.sh's places under ~/.cache/ctxpar/llama.cpp.
"""
import json
import os
import pathlib
import random
import struct
import subprocess
import sys
import tempfile

VERSION = "0.3.36"
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "ctxpar"
SRC = pathlib.Path(os.environ.get(
    "LLAMA_CPP_SRC", CACHE / f"llama.cpp/llama-cpp-python-{VERSION}/vendor/llama.cpp"))
BUILD = pathlib.Path(os.environ.get("LLAMA_CPP_BUILD", CACHE / f"llama.cpp/build-{VERSION}"))
HERE = pathlib.Path(__file__).resolve().parent
SEED = 20261205
RANDOM_COUNT = 240

# (name in the golden, vocabulary file, tokenizer.ggml.pre written over the file's or None)
VOCABS = [
    ("llama-bpe", "llama-bpe", None), ("qwen2", "qwen2", None), ("qwen35", "qwen35", None),
    ("deepseek-llm", "deepseek-llm", None), ("deepseek-coder", "deepseek-coder", None),
    ("deepseek-v3", "deepseek-llm", "deepseek-v3"), ("falcon", "falcon", None),
    ("mpt", "mpt", None), ("gpt-2", "gpt-2", None), ("starcoder", "starcoder", None),
    ("refact", "refact", None), ("command-r", "command-r", None), ("default", "gpt-neox", None),
    ("llama-spm", "llama-spm", None), ("phi-3", "phi-3", None), ("gemma-4", "gemma-4", None),
    ("bert-bge", "bert-bge", None), ("tekken", "llama-bpe", "tekken"),
    ("gpt-4o", "llama-bpe", "gpt-4o"),
]

# Pieces the regexes treat differently: each pre-tokenizer's classes, the boundaries of its
# ranges, and the characters the collapsed std::regex reads as something else.
PIECES = [
    "Hello", "world", " the", "THE", "it's", "IT'S", "we'll", "they'RE", "I'd", "'ve", "'x",
    "don't", "3", "42", "1234", "1234567", "3.14159", "1,000,000", "٣٤٥", "Ⅻ", "½", "²",
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", " \t\n ",
    "\u00a0", "\u3000", "\u2028", "\u0085", "\u2003", "\u200b", "\u202f", "\x0b", "\x0c",
    "!", "?!", "...", "—", "“quoted”", "«»", "¿", "！", "，", "。", "、", "：", "～", "（）",
    "$", "+", "<=>", "^", "`", "|", "~", "€", "©", "±", "∑", "→", "⌘", "@", "#", "%", "&",
    "*", "_", "-", "/", "\\", "[", "]", "{", "}", "(", ")", "\"", "'",
    "e\u0301", "\u0301", "a\u0308b", "न\u093f", "क्षि", "ก\u0e34", "\u05d1\u05bc",
    "中文", "我想在apple工作", "龥", "一", "ࠀ", "가나다", "퟿", "ひらがな", "カタカナ", "ー",
    "ｱｲｳ", "Ａｂｃ", "Привет", "Ωμέγα", "ΐ", "ß", "İstanbul", "ﬁ", "Ǆ", "ʓ", "ƻ", "µ",
    "𝐀𝐁", "𐐀𐑏", "𞤀", "ℂℇ", "ǅ", "ᏸ", "Ჿ", "ꭰ",
    "مرحبا", "שלום", "ខ្មែរ", "ມາ", "ᄀ", "🙂", "🦙", "👩‍💻", "🇫🇷", "✅", "❤️",
    "<s>", "</s>", "<|endoftext|>", "<|im_start|>", "[CLS]", "<unk>", "▁", "▁▁x",
    "\x00", "\x01", "\x1f", "\x7f", "\u0080", "\u009f", "\ufeff", "\ufffd", "\uffff",
    "\U0010ffff", "\ue000",
    "def f(x):\n    return x**2\n", "{\"a\": [1, 2]}", "<b>bold</b>", "http://x.y/z?q=1",
    "snake_case", "camelCase", "ALLCAPS", "x86_64", "v2.0-rc1",
]

HAND = [
    "", " ", "  ", "\n", " \n", "\n\n\n", "\t\n\t", "a", " a", "a ", "  a  ", "a\n", "\na",
    "Hello, world!", " Hello World", "HELLO'S", "it's 'quoted' 's", "1 22 333 4444 55555",
    "12345678901234567890", "x  \n  y", "a\u00a0b", "a\u3000b", "a \u3000 b", "\u3000。",
    "。\u3000", "x\u2028y", "x\u0085y", "   \n\n   x", "a\r\n\r\nb", "...\n", "!!!\n\n",
    " !", " !\n", "\t!", "a'sb", "'s", "' s", "e\u0301te\u0301", "ééé", "Ａ１２３", "①②③",
    "中文 English 日本語 한국어", "ひらがなカタカナ漢字", "Привет, мир!", "مرحبا بالعالم",
    "👩‍👩‍👧‍👦 family", "🇺🇸🇫🇷", "∀x∈ℝ: x²≥0", "$100 + €50 = <?>", "`code` | ~tilde~ ^caret",
    "def main():\n\tprint('hi')\n", "    indented\n        more\n", "<|im_start|>user\nhi<|im_end|>",
    "<s>[INST] hi [/INST]</s>", "[CLS] x [SEP]", "\u2581hello", "a\u200bb", "\ufeffBOM",
    "\x00nul", "tab\tsep\tvalues", "word-word_word.word/word", "ALL CAPS SENTENCE.",
    # Case changes inside a word, where tekken and gpt-4o split and llama-bpe merges across.
    "JavaScript and TypeScript", "iPhone macOS eBay jQuery", "getElementById", "McDonald's",
    "YouTube PowerPoint", "XMLHttpRequest", "ÉcoleNormale naïveÜber", "IT'S We'LL",
]


def corpus():
    rng = random.Random(SEED)
    texts = list(HAND) + list(PIECES)
    seen = set()
    for _ in range(RANDOM_COUNT * 3):
        if len(texts) >= len(HAND) + len(PIECES) + RANDOM_COUNT:
            break
        k = rng.randint(2, 7)
        t = "".join(rng.choice(PIECES) for _ in range(k))
        if t in seen:
            continue
        seen.add(t)
        texts.append(t)
    out, dup = [], set()
    for t in texts:
        if t not in dup:
            dup.add(t)
            out.append(t)
    return out


def with_pre(path: pathlib.Path, pre: str, workdir: pathlib.Path) -> pathlib.Path:
    """A copy of a GGUF v3 file with tokenizer.ggml.pre's string value replaced."""
    data = path.read_bytes()
    key = b"tokenizer.ggml.pre"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    assert struct.unpack_from("<I", data, at)[0] == 8  # a string
    n = struct.unpack_from("<Q", data, at + 4)[0]
    value = pre.encode()
    patched = data[:at + 4] + struct.pack("<Q", len(value)) + value + data[at + 12 + n:]
    out = workdir / f"{path.stem}-{pre}.gguf"
    out.write_bytes(patched)
    return out


def build_tool(workdir: pathlib.Path) -> pathlib.Path:
    exe = workdir / "tokenize_corpus"
    libdir = BUILD / "bin"
    subprocess.run(["g++", "-std=c++17", "-O1", str(HERE / "tokenize_corpus.cpp"),
                    f"-I{SRC / 'include'}", f"-I{SRC / 'ggml' / 'include'}", f"-L{libdir}",
                    "-lllama", f"-Wl,-rpath,{libdir}", "-o", str(exe)], check=True)
    return exe


def run(exe: pathlib.Path, model: pathlib.Path, texts, special=False) -> list:
    """plain: add_special and parse_special false; special: both true."""
    flag = b"\x01" if special else b"\x00"
    stdin = b"".join(flag + struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    r = subprocess.run([str(exe), str(model), "corpus" if special else "plain"], input=stdin,
                       capture_output=True, check=True)
    lines = r.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(texts), (model, len(lines), len(texts))
    return [[int(x) for x in line.split(";")[0].split()] for line in lines]


def special_corpus(model: pathlib.Path, name: str) -> list:
    sys.path.insert(0, str(SRC / "gguf-py"))
    from gguf import GGUFReader  # noqa: E402 (the sdist's gguf-py)
    fields = GGUFReader(str(model)).fields
    tokens = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8", "replace")
              for i in fields["tokenizer.ggml.tokens"].data]
    types = ([int(fields["tokenizer.ggml.token_type"].parts[i][0])
              for i in fields["tokenizer.ggml.token_type"].data]
             if "tokenizer.ggml.token_type" in fields else [1] * len(tokens))
    specials = [t for t, ty in zip(tokens, types) if ty in (2, 3, 4) and t]
    rng = random.Random(f"{SEED}-{name}")
    specials = rng.sample(specials, min(24, len(specials)))
    texts = []
    while len(texts) < 80:
        parts = []
        for _ in range(rng.randint(1, 8)):
            x = rng.random()
            if x < 0.35:
                parts.append(rng.choice(specials))
            elif x < 0.5:
                parts.append(rng.choice([" ", "  ", "\n", " \n ", "\t"]))
            else:
                parts.append(rng.choice(PIECES))
        text = "".join(parts)
        if text not in texts:
            texts.append(text)
    return texts


def main() -> None:
    texts = corpus()
    golden = {"llama_cpp_python": VERSION, "add_special": False, "parse_special": False,
              "texts": texts, "vocabs": []}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        exe = build_tool(workdir)
        for name, vocab, pre in VOCABS:
            path = SRC / "models" / f"ggml-vocab-{vocab}.gguf"
            if pre is not None:
                path = with_pre(path, pre, workdir)
            special_texts = special_corpus(path, name)
            golden["vocabs"].append({"name": name, "file": f"ggml-vocab-{vocab}.gguf",
                                     "pre": pre, "ids": run(exe, path, texts),
                                     "special_texts": special_texts,
                                     "special_ids": run(exe, path, special_texts, True)})
            print(f"{name}: {len(texts)} texts", file=sys.stderr)
    json.dump(golden, sys.stdout, ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
