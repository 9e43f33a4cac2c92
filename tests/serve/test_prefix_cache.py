"""The prefix cache through the server: the OpenAI client sees usage.prompt_tokens_details.
cached_tokens (and /generate meta_info.cached_tokens) with the same answer as without a hit,
/metrics counts the hits under SGLang's names, POST /flush_cache empties the cache and is refused
(400) while a request runs, and --disable-radix-cache turns it off. A model with sliding-window
layers (Gemma 3) hits past its window with the same answer."""

import json
import os
import threading
import time

import openai
import pytest
import requests

from conftest import MODEL_NAME, start

# Long enough for several whole pages of 16 tokens.
SYSTEM = ("You are a careful assistant. Answer in one short sentence, and never use more words "
          "than needed. " * 6)


@pytest.fixture(scope="module")
def server(request):
    return start(request, "--max-running-requests", "8")


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def completion(server, prompt):
    return client(server).completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8,
                                             temperature=0, logprobs=2)


def test_openai_client_sees_cached_tokens_and_the_same_answer(server):
    prompt = SYSTEM + "Question: what is the capital of France?"
    first = completion(server, prompt)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = completion(server, prompt)
    n = second.usage.prompt_tokens
    # Whole pages of 16, the last prompt token always computed.
    assert second.usage.prompt_tokens_details.cached_tokens == (n - 1) // 16 * 16 > 0
    assert second.choices[0].text == first.choices[0].text
    assert second.choices[0].logprobs.token_logprobs == first.choices[0].logprobs.token_logprobs
    assert second.choices[0].logprobs.top_logprobs == first.choices[0].logprobs.top_logprobs


def test_chat_stream_usage_and_generate_meta_info_carry_cached_tokens(server):
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Name a color."}]
    c = client(server)
    c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=4, temperature=0)
    chunks = list(c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=4,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens >= 16 * (usage.prompt_tokens // 16 - 1)
    body = {"text": SYSTEM + "Question: 2 + 2?", "sampling_params": {"max_new_tokens": 2}}
    requests.post(server.url + "/generate", json=body, timeout=120).raise_for_status()
    meta = requests.post(server.url + "/generate", json=body, timeout=120).json()["meta_info"]
    assert meta["cached_tokens"] == (meta["prompt_tokens"] - 1) // 16 * 16 > 0
    m = server.metrics()
    assert m["sglang:cached_tokens_total"] >= meta["cached_tokens"]
    assert 0 < m["sglang:cache_hit_rate"] < 1
    assert m["ctxpar:radix_cache_tokens"] > 0


def test_flush_cache_empties_the_cache_and_is_refused_while_a_request_runs(server):
    prompt = SYSTEM + "Question: what is the largest planet?"
    completion(server, prompt)
    assert server.metrics()["ctxpar:radix_cache_tokens"] > 0

    # A long stream keeps a request running while the flush is asked for.
    started = threading.Event()
    done = threading.Event()

    def stream():
        body = {"text": "Count: 1, 2, 3,", "stream": True,
                "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
        with requests.post(server.url + "/generate", json=body, stream=True, timeout=600) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    started.set()
                    if done.is_set():
                        break
                    json.loads(line[6:])

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(120)
    refused = requests.post(server.url + "/flush_cache", timeout=30)
    done.set()
    t.join(600)
    assert refused.status_code == 400, refused.text
    assert refused.text.startswith("Cache not flushed because there are pending requests.")
    assert "#running-req: 1" in refused.text
    assert server.metrics()["ctxpar:radix_cache_tokens"] > 0

    # The disconnected stream is cancelled; once nothing runs the flush goes through.
    for _ in range(100):
        flushed = requests.post(server.url + "/flush_cache", timeout=30)
        if flushed.status_code == 200:
            break
        time.sleep(0.1)
    assert flushed.status_code == 200, flushed.text
    assert flushed.text.startswith("Cache flushed.\nPlease check backend logs")
    m = server.metrics()
    assert m["ctxpar:radix_cache_tokens"] == 0
    assert m["sglang:num_used_tokens"] == 0
    assert completion(server, prompt).usage.prompt_tokens_details.cached_tokens == 0
    assert requests.get(server.url + "/flush_cache", timeout=30).status_code == 200


def test_disable_radix_cache_and_lpm_policy(request):
    off = start(request, "--disable-radix-cache", "--schedule-policy", "lpm")
    info = requests.get(off.url + "/get_server_info").json()
    assert info["disable_radix_cache"] is True
    assert info["schedule_policy"] == "lpm"
    prompt = SYSTEM + "Question: what colour is the sky?"
    completion(off, prompt)
    assert completion(off, prompt).usage.prompt_tokens_details.cached_tokens == 0
    assert off.metrics()["ctxpar:radix_cache_tokens"] == 0
    assert requests.post(off.url + "/flush_cache", timeout=30).status_code == 200


def test_a_model_with_window_layers_hits_past_its_window(request):
    gemma = os.environ.get("CTXPAR_GEMMA3_MODEL")
    if not gemma or not os.path.exists(gemma):
        pytest.skip("CTXPAR_GEMMA3_MODEL is not set to the Gemma 3 270M file")
    server = start(request, model=gemma)
    # About 800 tokens: a hit reaches past Gemma 3's window of 512, so its window layers read the
    # cached window pages of the prefix's end.
    long_system = SYSTEM * 6

    def generate(question):
        body = {"text": long_system + question, "return_logprob": True,
                "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
        return requests.post(server.url + "/generate", json=body, timeout=120).json()

    first = generate("Question: what is the capital of France?")
    again = generate("Question: what is the capital of France?")
    other = generate("Question: what is the capital of Italy?")
    assert first["meta_info"]["prompt_tokens"] > 700
    assert first["meta_info"]["cached_tokens"] == 0
    whole_pages = (first["meta_info"]["prompt_tokens"] - 1) // 16 * 16
    assert again["meta_info"]["cached_tokens"] == whole_pages
    assert other["meta_info"]["cached_tokens"] > 512
    assert again["text"] == first["text"]
    assert (again["meta_info"]["output_token_logprobs"] ==
            first["meta_info"]["output_token_logprobs"])
    assert server.metrics()["ctxpar:radix_cache_tokens"] > 0
    assert requests.post(server.url + "/flush_cache", timeout=30).status_code == 200
    assert server.metrics()["ctxpar:radix_cache_tokens"] == 0
    assert "radix_cache=on" in server.output()
