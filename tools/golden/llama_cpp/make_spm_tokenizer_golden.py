#!/usr/bin/env python3
"""Writes tests/data/tokenizer/gemma3_spm.json: llama.cpp's token ids and pieces for a seeded
corpus of 2,000+ strings, digests over the whole vocabulary, and Gemma's chat templates rendered
by jinja2 with llama.cpp's ids, for gemma-3-270m-q4_k_m.gguf (SentencePiece,
tokenizer.ggml.model = "llama"; the file carries no chat template, so the templates come from
tests/data/tokenizer: Google's Gemma 3 template and llama.cpp's copy of Gemma 2's).

llama.cpp is the reference: tokenize_corpus.cpp (beside this file) is built here against the
libllama of the build that bench/llama_cpp/build.sh makes, and runs llama_tokenize,
llama_token_to_piece and llama_detokenize on each string, with parse_special false (a user's
text) and true (a template's text, or llama-server's completion prompt).

    bash bench/llama_cpp/build.sh    # llama.cpp from llama-cpp-python 0.3.36's sources
    ~/.cache/ctxpar/venv/bin/python tools/golden/llama_cpp/make_spm_tokenizer_golden.py \\
        ~/.cache/ctxpar/models/gemma-3-270m-q4_k_m.gguf > tests/data/tokenizer/gemma3_spm.json

jinja2 renders the templates as Hugging Face's apply_chat_template does (trim_blocks,
lstrip_blocks, raise_exception); llama.cpp tokenizes the rendering with parse_special, after the
leading "<bos>" text, which llama-server strips when the tokenizer adds BOS itself.

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

import jinja2

VERSION = "0.3.36"
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "ctxpar"
SRC = pathlib.Path(os.environ.get(
    "LLAMA_CPP_SRC", CACHE / f"llama.cpp/llama-cpp-python-{VERSION}/vendor/llama.cpp"))
BUILD = pathlib.Path(os.environ.get("LLAMA_CPP_BUILD", CACHE / f"llama.cpp/build-{VERSION}"))
HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent.parent.parent / "tests" / "data" / "tokenizer"
SEED = 20261203
RANDOM_COUNT = 1950

SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
            "<unused0>", "<unused17>", "<unused6241>", "[multimodal]", "<start_of_image>",
            "<end_of_image>", "<table>", "</td>", "<h1>", "<b>", "</blockquote>", "<0x41>",
            "<0x0A>", "<0xff>", "</s>", "<s>", "<|im_end|>", "<|endoftext|>"]
PARTIAL_SPECIALS = ["<start_of_turn", "start_of_turn>", "<end_of_turn", "<bo", "bos>", "<eos",
                    "<start_of_turn><", "<<bos>>", "<unused>", "<unused99999>", "< bos>",
                    "<BOS>", "<end_of_turn >", "[multimodal", "<table", "</td"]


def hard_cases():
    """Hand-picked strings for the rules most likely to go wrong."""
    cases = [
        "", " ", "  ", "   ", " " * 31, " " * 32, " " * 33, " " * 70, "a", " a", "a ", " a ",
        "a  b", "a   b", "a" + " " * 40 + "b", "\t", "\t\t\t", "\t" * 35, "\n", "\n\n",
        "\n" * 31, "\n" * 32, "\n" * 50, "\r\n", "\r\n\r\n", "\r", " \n \n ", "\n \n", " \t\n",
        "x\n\ny", "x \n y", "\u00a0", "a\u00a0b", "\u3000", "\u2009x", "\u2581", "\u2581\u2581x",
        "\u2581 \u2581", "Hello world", "Hello, world!", "hello world ", "  Hello", "HELLO",
        "The quick brown fox jumps over the lazy dog.",
        "I'm sure you've seen it; we'll see, they'd say it's John's.",
        "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
        "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n}\n",
        '{"key": [1, 2.5, null], "nested": {"a": true}}',
        "<table><tr><td>1</td></tr></table>", "<h1>Title</h1>\n<b>bold</b> <i>it</i>",
        "<div class=\"x\">\n  <span>hi</span>\n</div>", "https://example.com/path?q=1&b=two#frag",
        "0123456789", "3.14159265358979", "1,234,567.89", "+1 (555) 010-9999",
        "Café, naïve, façade, résumé, Ångström, Dvořák", "Straße Größe Übermäßig",
        "Καλημέρα κόσμε", "Привет, мир! Ёжик", "你好，世界！我们今天学习中文。",
        "こんにちは世界。カタカナとひらがな、漢字。", "안녕하세요 세계", "مرحبا بالعالم",
        "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "e\u0301 a\u0308 n\u0303",
        "I love 🍕 and 🐍! 👍🏽 👨‍👩‍👧 🇫🇷 1️⃣", "🏳️‍🌈🏴‍☠️🧑🏿‍🚀", "𝕳𝖊𝖑𝖑𝖔 𝟙𝟚𝟛", "𠀀𠀁𪚥",
        "© ® ™ € £ ¥ § ¶ • … → ← ≤ ≥ ≠ ∞ √ π µ", "E = mc² and x₁ + x₂ = ½",
        "zero\u200bwidth\u200djoiner\ufeffbom", "\ufeffstart with BOM", "\U000e0041\U000e0042",
        "\x00", "a\x00b", "\x01\x02\x03\x04\x05\x06\x07\x08", "\x0b\x0c\x0e\x0f\x10\x1b[0m",
        "\x1c\x1d\x1e\x1f\x7f", "\x80\x85\x9f", "bell\x07 escape\x1b[31mred\x1b[0m",
        "\U0010ffff", "\ue000\uf8ff", "\ufffd", "\ufffe\uffff",
    ]
    for s in SPECIALS + PARTIAL_SPECIALS:
        cases += [s, f" {s}", f"{s} ", f"x{s}y", f"{s}{s}", f"hi {s}\nthere"]
    cases += [
        "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
        "<bos><start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model\nI am",
        "hi<end_of_turn>\n<start_of_turn>model\nSure", "<eos><bos><pad><unk><mask>",
        "<start_of_turn><end_of_turn>", "<start_of_turn>  <end_of_turn>\n\n",
        "<start_of_image>[multimodal]<end_of_image>", "<unused0><unused1>x<unused2>",
        "text <0x41><0x42> bytes", "\u2581<bos>\u2581",
    ]
    invalid = [
        b"\xff", b"\xfe\xff", b"\x80", b"\xbf\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xc3", b"a\xc3",
        b"\xc3a", b"\xe4\xb8", b"\xe4\xb8a", b"\xf0\x9f\x98", b"\xf0\x9f\x98a", b"\xf0\x9f",
        b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
        b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80",
        b"ok \xff\xfe bad \xc3 cut \xe4\xb8 end \xf0\x9f\x98",
        b"\xe4\xbd\xa0\xe5\xa5", b"\xa0\xe5\xa5\xbd", b"<start_of_turn>\xff<end_of_turn>",
        b"\xc3\xa9\xc3", b" \xf0\x9f\x98\x80\xf0\x9f\x98", b"\x00\xff\x00",
    ]
    return [c.encode("utf-8") for c in cases] + invalid


WORDS = ("the of and to in is you that it he was for on are as with his they at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could people "
         "my than first water been call who oil its now find long down day did get come made may "
         "part tokenizer context parallel attention Gemma model sentencepiece llama cpp").split()
CODE = ["(", ")", "{", "}", "[", "]", ";", ":", "=", "==", "!=", "<=", ">=", "->", "::", "+=",
        "++", "&&", "||", "/*", "*/", "//", "#", "#include <vector>", "def ", "return ", "self.",
        "std::", "    ", "\t", "\n", "\"", "'", "`", "\\", "\\n", "${x}", "<T>", "</", "/>", "...",
        "__init__", "0x1F", "1e-6", "fn main()", "import numpy as np", "SELECT * FROM t;"]
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏿", "❤️", "🔥", "🚀", "🇯🇵", "🇺🇸", "👩‍💻", "👨‍👩‍👧‍👦",
         "🤷‍♀️", "✨", "🎉", "☕", "⌚", "🫠", "🧬", "#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]
SCRIPT_RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
                 (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
                 (0x2000, 0x206F), (0x2190, 0x22FF), (0x2500, 0x25FF), (0x3000, 0x30FF),
                 (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF),
                 (0xFF00, 0xFFEF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF), (0x1F000, 0x1FAFF),
                 (0x20000, 0x2A6DF), (0xE0000, 0xE007F), (0xF0000, 0xF00FF)]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2581"]


def random_atom(rng: random.Random) -> bytes:
    kind = rng.choices(["word", "space", "code", "digits", "emoji", "cjk", "script", "control",
                        "special", "partial", "invalid"],
                       weights=[30, 14, 12, 6, 6, 8, 10, 3, 4, 3, 4])[0]
    if kind == "word":
        w = rng.choice(WORDS)
        w = w.capitalize() if rng.random() < 0.2 else w.upper() if rng.random() < 0.05 else w
        return ((" " if rng.random() < 0.7 else "") + w).encode()
    if kind == "space":
        s = rng.choice(WHITESPACE)
        return (s * rng.choice([1, 1, 1, 2, 3, 5, 17, 40])).encode()
    if kind == "code":
        return rng.choice(CODE).encode()
    if kind == "digits":
        return str(rng.randint(0, 10 ** rng.randint(1, 12))).encode()
    if kind == "emoji":
        return rng.choice(EMOJI).encode()
    if kind == "cjk":
        lo, hi = rng.choice([(0x4E00, 0x9FFF), (0x3040, 0x30FF), (0xAC00, 0xD7A3)])
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))).encode()
    if kind == "script":
        lo, hi = rng.choice(SCRIPT_RANGES)
        return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 5))).encode()
    if kind == "control":
        return chr(rng.choice(list(range(0, 0x20)) + [0x7F] + list(range(0x80, 0xA0)))).encode()
    if kind == "special":
        s = rng.choice(SPECIALS[:11])
        return s.encode() if s != "<unused0>" else f"<unused{rng.randint(0, 6241)}>".encode()
    if kind == "partial":
        return rng.choice(PARTIAL_SPECIALS).encode()
    # Invalid UTF-8: a stray byte, or a valid character cut short.
    if rng.random() < 0.5:
        return bytes([rng.randint(0x80, 0xFF)])
    c = chr(rng.randint(0x80, 0x10FFFF))
    while 0xD800 <= ord(c) <= 0xDFFF:
        c = chr(rng.randint(0x80, 0x10FFFF))
    e = c.encode()
    return e[:rng.randint(1, len(e) - 1)]


def random_cases(count: int, seed: int):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.choice([1, 1, 2, 2, 3, 4, 5, 8])
        out.append(b"".join(random_atom(rng) for _ in range(n)))
    return out


def gemma_templates():
    gemma3 = (DATA / "gemma3_chat_template.jinja").read_text()
    return {
        "gemma3": gemma3,
        # The variant of some Gemma 3 conversions (gemma-3-1b-it QAT): one newline after the
        # system text.
        "gemma3_one_newline": gemma3.replace("+ '\\n\\n'", "+ '\\n'"),
        "gemma2": (DATA / "gemma2_chat_template.jinja").read_text(),
    }


def m(role, content):
    return {"role": role, "content": content}


# (name, messages, add_generation_prompt, continue_final_message)
CHATS = [
    ("user_only", [m("user", "What is the capital of France?")], True, False),
    ("system_user", [m("system", "You are terse."), m("user", "Hi!")], True, False),
    ("multi_turn", [m("user", "Count to three."), m("assistant", "1, 2, 3."),
                    m("user", "Now backwards,\nplease.")], True, False),
    ("no_generation_prompt", [m("user", "Hello"), m("assistant", "Hi there!")], False, False),
    ("trimmed", [m("user", "  padded \n\n"), m("assistant", "\u3000ideographic\u00a0\t"),
                 m("user", "\x1c\x1dseparators\x85\u2028\u200b")], True, False),
    ("system_untrimmed", [m("system", "  Be brief.  \n"), m("user", " Why? ")], True, False),
    ("system_only", [m("system", "Nobody listens.")], True, False),
    ("system_then_assistant", [m("system", "S"), m("assistant", "A")], True, False),
    ("assistant_first", [m("assistant", "I start.")], True, False),
    ("two_users", [m("user", "a"), m("user", "b")], True, False),
    ("system_second", [m("user", "a"), m("system", "late system")], True, False),
    ("unicode", [m("user", "Traduis « bonjour » en 中文 🙂 and <b>bold</b>")], True, False),
    ("empty_content", [m("user", "")], True, False),
    ("empty", [], True, False),
    ("continue", [m("user", "Write a haiku."), m("assistant", "Autumn moonlight  ")], False, True),
    ("continue_first", [m("system", "Sys"), m("user", "Complete: The sky is")], False, True),
]


def render_chats():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    out = []
    for template_name, source in gemma_templates().items():
        template = env.from_string(source)
        for name, messages, add_gen, cont in CHATS:
            case = {"template": template_name, "name": name, "messages": messages,
                    "add_generation_prompt": add_gen, "continue_final_message": cont}
            try:
                rendered = template.render(messages=messages, add_generation_prompt=add_gen,
                                           bos_token="<bos>", eos_token="<eos>")
            except jinja2.exceptions.TemplateError as e:
                case["error"] = str(e)
                out.append(case)
                continue
            if cont:
                # Hugging Face's rule: cut right after the last message's stripped content.
                last = messages[-1]["content"].strip()
                rendered = rendered[:rendered.rindex(last) + len(last)]
            assert rendered.startswith("<bos>")
            case["rendered"] = rendered[len("<bos>"):]
            out.append(case)
    return out


def build_tool(workdir: pathlib.Path) -> pathlib.Path:
    exe = workdir / "tokenize_corpus"
    libdir = BUILD / "bin"
    subprocess.run(["g++", "-std=c++17", "-O1", str(HERE / "tokenize_corpus.cpp"),
                    f"-I{SRC / 'include'}", f"-I{SRC / 'ggml' / 'include'}", f"-L{libdir}",
                    "-lllama", f"-Wl,-rpath,{libdir}", "-o", str(exe)], check=True)
    return exe


def run_tool(exe, model, mode, stdin=b""):
    r = subprocess.run([str(exe), model, mode], input=stdin, capture_output=True, check=True)
    return r.stdout.decode("ascii").splitlines()


def fnv1a64(chunks) -> str:
    h = 0xCBF29CE484222325
    for chunk in chunks:
        for b in chunk:
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def ids_of(field: str):
    return [int(x) for x in field.split()] if field else []


def main() -> None:
    model = sys.argv[1]
    texts = list(dict.fromkeys(hard_cases() + random_cases(RANDOM_COUNT, SEED)))
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_tool(pathlib.Path(tmp))
        records = b"".join(struct.pack("<BI", special, len(t)) + t
                           for t in texts for special in (0, 1))
        lines = run_tool(exe, model, "corpus", records)
        chats = render_chats()
        rendered = [c["rendered"].encode() for c in chats if "rendered" in c]
        chat_lines = run_tool(exe, model, "corpus",
                              b"".join(struct.pack("<BI", 1, len(t)) + t for t in rendered))
        vocab_lines = run_tool(exe, model, "vocab")
    assert len(lines) == 2 * len(texts)

    chat_ids = iter(ids_of(line.split(";")[0]) for line in chat_lines)
    for c in chats:
        if "rendered" in c:
            c["ids"] = next(chat_ids)

    split = [line.split(";") for line in vocab_lines]
    # Every text starts with BOS (tokenizer.ggml.add_bos_token), rendered with special true.
    bos = int(lines[0].split(";")[0].split()[0])
    bos_text = bytes.fromhex(split[bos][1])
    cases = []
    for k, text in enumerate(texts):
        user, special = (line.split(";") for line in lines[2 * k:2 * k + 2])
        case = {}
        try:
            case["t"] = text.decode("utf-8")
        except UnicodeDecodeError:
            case["x"] = text.hex()
        case["i"] = ids_of(user[0])
        if user[0] != special[0]:
            case["s"] = ids_of(special[0])
        # Pieces (llama_token_to_piece, special false / true) of the user's ids ("p", "ps") and
        # of the parsed ids ("q", "qs"), hex, each left out when it is its default: p the text,
        # ps BOS's text and p, q and qs those of the user's ids when the ids are the same, else
        # the text and BOS's text and the text.
        p = bytes.fromhex(user[1])
        defaults = {"p": text, "ps": bos_text + p}
        if user[0] == special[0]:
            defaults.update(q=p, qs=bos_text + p)
        else:
            defaults.update(q=text, qs=bos_text + text)
        for key, hexed in (("p", user[1]), ("ps", user[2]), ("q", special[1]),
                           ("qs", special[2])):
            if bytes.fromhex(hexed) != defaults[key]:
                case[key] = hexed
        for fields in (user, special):
            assert fields[3] == fields[1], f"llama_detokenize differs from the pieces for {text!r}"
        # What a stream of the user's ids prints: Python's decoding with U+FFFD replacement.
        pieces = bytes.fromhex(user[1])
        printed = pieces.decode("utf-8", errors="replace")
        if printed.encode() != pieces:
            case["u"] = printed
        cases.append(case)

    def length_prefixed(blob: bytes) -> bytes:
        return struct.pack("<I", len(blob)) + blob

    def ids_blob(ids) -> bytes:
        return struct.pack(f"<I{len(ids)}i", len(ids), *ids)

    not_itself = [i for i, f in enumerate(split) if ids_of(f[2]) != [i]]
    out = {
        "generator": "tools/golden/llama_cpp/make_spm_tokenizer_golden.py",
        "model": pathlib.Path(model).name,
        "reference": f"llama.cpp vendored by llama-cpp-python {VERSION} (libllama, tokenize_corpus.cpp)",
        "seed": SEED,
        "calls": "t: the text (x: its hex when not UTF-8); i: llama_tokenize(add_special=true, "
                 "parse_special=false); s: the same with parse_special=true, when it differs; "
                 "p/ps: token_to_piece(special=false/true) of i concatenated, q/qs: of s, hex, "
                 "when not their defaults (p: the text; ps: BOS's piece + p; q/qs: p/ps when s "
                 "is absent, else the text / BOS's piece + the text); u: Python's "
                 "decode(errors='replace') of p when p is not valid UTF-8",
        "vocab": {
            "size": len(split),
            "digest": "FNV-1a 64 over every token id: u32 length + bytes (pieces), or u32 count "
                      "+ i32 ids (text_ids: llama_tokenize(token text, false, false))",
            "pieces": fnv1a64(length_prefixed(bytes.fromhex(f[0])) for f in split),
            "pieces_special": fnv1a64(length_prefixed(bytes.fromhex(f[1])) for f in split),
            "text_ids": fnv1a64(ids_blob(ids_of(f[2])) for f in split),
            "text_not_itself": len(not_itself),
            "text_not_itself_first": not_itself[:64],
        },
        "jinja2": jinja2.__version__,
        "chat_call": "jinja2 render (trim_blocks, lstrip_blocks) of the template with "
                     "bos_token '<bos>'; rendered: after that '<bos>'; ids: "
                     "llama_tokenize(rendered, add_special=true, parse_special=true)",
        "chat": chats,
        "cases": cases,
    }
    sys.stdout.write("{\n")
    items = list(out.items())
    for n, (key, value) in enumerate(items):
        sys.stdout.write(f"  {json.dumps(key)}: ")
        if isinstance(value, list):
            body = ",\n".join("    " + json.dumps(v, ensure_ascii=False) for v in value)
            sys.stdout.write("[\n" + body + "\n  ]")
        else:
            sys.stdout.write(json.dumps(value, ensure_ascii=False))
        sys.stdout.write(",\n" if n + 1 < len(items) else "\n")
    sys.stdout.write("}\n")


if __name__ == "__main__":
    main()
