#!/usr/bin/env python3
"""Goldens for ctxpar's chat templates: transformers' apply_chat_template over the real templates
that llama-cpp-python's sdist carries (vendor/llama.cpp/models/templates/*.jinja).

Every template renders a set of conversations (plain, with a system message, multi-turn, with
tools offered, with tool calls and tool results, with reasoning, continue_final_message, content
parts, odd whitespace) with add_generation_prompt true and false, through a tokenizer object that
holds the template and the model's BOS / EOS texts, so that the call is apply_chat_template itself
(tokenize=False). strftime_now is fixed at 2025-03-14 12:00:00 (naive local time; the C++ test
renders the same instant with TZ=UTC). A render that raises is recorded with its message.

    python3 -m venv ~/.cache/ctxpar/jinja-venv
    ~/.cache/ctxpar/jinja-venv/bin/pip install transformers jinja2      # no torch
    ~/.cache/ctxpar/jinja-venv/bin/python tools/golden/chat_templates/make_chat_template_golden.py \
        ~/.cache/ctxpar/llama.cpp/llama-cpp-python-0.3.36 > tests/data/chat_template/golden.json

The named templates of issue 35 keep their rendered text; the others keep its length and
FNV-1a 64 digest (the whole text would make the file megabytes), which the test compares.
"""
import datetime as dt
import json
import pathlib
import sys

import jinja2
import tokenizers
import transformers
from transformers import PreTrainedTokenizerFast
from transformers.utils import chat_template_utils

NOW = dt.datetime(2025, 3, 14, 12, 0, 0)
NOW_EPOCH = int(NOW.replace(tzinfo=dt.timezone.utc).timestamp())


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW if tz is None else NOW.replace(tzinfo=dt.timezone.utc).astimezone(tz)


# transformers' strftime_now reads the module's `datetime` when it runs.
chat_template_utils.datetime = FixedDatetime

# Templates whose full text is kept (the list), by file name.
NAMED = [
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen3-Coder.jinja",
    "google-gemma-2-2b-it.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "openai-gpt-oss-120b.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
]

DEEPSEEK = ("<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>")
# The BOS / EOS texts of the models the templates come from (by file-name prefix), as their
# tokenizer_config.json states them; "" where the model has none.
SPECIAL = [
    ("meta-llama-", ("<|begin_of_text|>", "<|eot_id|>")),
    ("fireworks-ai-llama-3", ("<|begin_of_text|>", "<|eot_id|>")),
    ("NousResearch-", ("<|begin_of_text|>", "<|im_end|>")),
    ("Qwen", ("", "<|im_end|>")),
    ("HuggingFaceTB-SmolLM3", ("", "<|im_end|>")),
    ("google-gemma", ("<bos>", "<eos>")),
    ("microsoft-Phi-3.5", ("<s>", "<|endoftext|>")),
    ("deepseek-ai-", DEEPSEEK),
    ("llama-cpp-deepseek", DEEPSEEK),
    ("openai-gpt-oss", ("<|startoftext|>", "<|return|>")),
]
DEFAULT_SPECIAL = ("<s>", "</s>")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The local time in a time zone.",
            "parameters": {
                "type": "object",
                "properties": {"timezone": {"type": "string"}},
                "required": ["timezone"],
            },
        },
    },
]


def msg(role, content, **extra):
    return {"role": role, "content": content, **extra}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


SYSTEM = msg("system", "You are a concise assistant.")
WEATHER_Q = msg("user", "What's the weather in Paris?")
BOTH_Q = msg("user", "What's the weather in Paris, and what time is it in Tokyo?")
# Mistral's templates want tool-call ids of 9 alphanumerics. Llama 3.1's takes one call a turn.
WEATHER_CALL = call("call00001", "get_weather", {"location": "Paris", "unit": "celsius"})
TIME_CALL = call("call00002", "get_time", {"timezone": "Asia/Tokyo"})
WEATHER_RESULT = msg("tool", '{"temperature": 22, "unit": "celsius"}', tool_call_id="call00001",
                     name="get_weather")
TIME_RESULT = msg("tool", '{"time": "21:00"}', tool_call_id="call00002", name="get_time")

# (name, messages, with tools, add_generation_prompt values, continue_final_message)
CONVERSATIONS = [
    ("user", [msg("user", "Hello! What can you do?")], False, (True, False), False),
    ("system", [SYSTEM, msg("user", "Name three primes.")], False, (True, False), False),
    ("multi_turn", [SYSTEM, msg("user", "Count to three."), msg("assistant", "1, 2, 3."),
                    msg("user", "Now backwards,\nplease.")], False, (True, False), False),
    ("tools_offered", [WEATHER_Q], True, (True,), False),
    ("tool_call", [SYSTEM, WEATHER_Q, msg("assistant", "", tool_calls=[WEATHER_CALL]),
                   WEATHER_RESULT], True, (True, False), False),
    ("parallel_tool_calls", [BOTH_Q, msg("assistant", "", tool_calls=[WEATHER_CALL, TIME_CALL]),
                             WEATHER_RESULT, TIME_RESULT], True, (True,), False),
    ("tool_call_answered", [WEATHER_Q, msg("assistant", None, tool_calls=[WEATHER_CALL]),
                            WEATHER_RESULT, msg("assistant", "It is 22 \u00b0C in Paris."),
                            msg("user", "Thanks!")], True, (True,), False),
    ("reasoning", [msg("user", "Is 91 prime?"),
                   msg("assistant", "No: 91 = 7 \u00d7 13.",
                       reasoning_content="Try small primes: 91 / 7 = 13."),
                   msg("user", "And 97?")], False, (True,), False),
    ("continue", [msg("user", "Write a haiku about rain."),
                  msg("assistant", "Soft rain on the roof")], False, (False,), True),
    ("content_parts", [SYSTEM, msg("user", [{"type": "text", "text": "Describe"},
                                            {"type": "text", "text": " this."}])],
     False, (True,), False),
    ("whitespace_unicode", [msg("user", "  Traduis \u00ab bonjour \u00bb en \u4e2d\u6587 "
                                        "\U0001f642\n\n<b>bold</b>\t ")], False, (True,), False),
]


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def render(tok, messages, tools, add_generation_prompt, continue_final_message):
    try:
        return {"rendered": tok.apply_chat_template(
            messages, tools=TOOLS if tools else None, tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message)}
    except Exception as e:  # the template's raise_exception, or what jinja2 refuses
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    sdist = pathlib.Path(sys.argv[1])
    template_dir = sdist / "vendor" / "llama.cpp" / "models" / "templates"
    vocab = tokenizers.Tokenizer(tokenizers.models.WordLevel({"x": 0}, unk_token="x"))
    templates = []
    for path in sorted(template_dir.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        bos, eos = next((s for prefix, s in SPECIAL if path.name.startswith(prefix)),
                        DEFAULT_SPECIAL)
        tok = PreTrainedTokenizerFast(tokenizer_object=vocab, chat_template=source,
                                      bos_token=bos or None, eos_token=eos or None)
        named = path.name in NAMED
        cases = []
        for name, messages, tools, gens, cont in CONVERSATIONS:
            for gen in gens:
                case = {"conversation": name, "add_generation_prompt": gen}
                result = render(tok, json.loads(json.dumps(messages)), tools, gen, cont)
                if "rendered" in result and not named:
                    text = result["rendered"].encode("utf-8")
                    result = {"length": len(text), "fnv1a64": fnv1a64(text)}
                case.update(result)
                cases.append(case)
        templates.append({
            "file": path.name,
            "fnv1a64": fnv1a64(path.read_bytes()),
            "named": named,
            "bos_token": bos,
            "eos_token": eos,
            "cases": cases,
        })
    missing = sorted(set(NAMED) - {t["file"] for t in templates})
    if missing:
        sys.exit(f"templates not in {template_dir}: {missing}")
    out = {
        "generator": "tools/golden/chat_templates/make_chat_template_golden.py",
        "source": "llama-cpp-python " + sdist.name.rsplit("-", 1)[-1] +
                  " sdist, vendor/llama.cpp/models/templates",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "call": "PreTrainedTokenizerFast(chat_template=..., bos_token=..., eos_token=...)"
                ".apply_chat_template(messages, tools=..., tokenize=False, "
                "add_generation_prompt=..., continue_final_message=...)",
        "now": NOW.isoformat(),
        "now_epoch_utc": NOW_EPOCH,
        "tools": TOOLS,
        "conversations": [{"name": n, "messages": m, "tools": t, "continue_final_message": c}
                          for n, m, t, _, c in CONVERSATIONS],
        "templates": templates,
    }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
