"""The OpenAI and SGLang routes of `ctxpar serve` through the real `openai` client and raw HTTP,
on the structure llama.cpp's server tests check: the role-first chunk, one id per stream,
[DONE], usage equal to what /tokenize counts, tokenize / detokenize round trips."""

import json
import pathlib

import openai
import pytest
import requests

from conftest import MODEL_NAME, start


def client(server, key="unused"):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def sse_payloads(response):
    """The data payloads of a raw SSE response, checking the framing."""
    payloads = []
    for frame in response.text.split("\n\n"):
        if not frame:
            continue
        lines = [l for l in frame.split("\n") if not l.startswith(":")]
        if not lines:
            continue
        assert len(lines) == 1 and lines[0].startswith("data: "), frame
        payloads.append(lines[0][len("data: "):])
    return payloads


def count_tokens(server, text):
    r = requests.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    return r.json()["count"]


def test_health_models_and_server_info(server):
    assert requests.get(server.url + "/health").status_code == 200
    models = client(server).models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    info = requests.get(server.url + "/get_server_info").json()
    assert info["max_total_num_tokens"] > 0
    assert info["tp_size"] == 1
    assert info["sources"]["max_running_requests"] == "user"
    assert info["sources"]["dcp_size"] == "default"
    # Every resolved field, floats too (they were null).
    assert info["schedule_conservativeness"] == 1.0


def test_chat_stream_role_first_one_id_and_usage(server):
    stream = client(server).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Say hello."}], max_tokens=12,
        temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes in (["stop"], ["length"])
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    # The prompt is the rendered conversation; the completion re-tokenizes to its count unless
    # it stopped on <|im_end|>, which is counted but gives no text.
    completion = count_tokens(server, text)
    assert usage.completion_tokens == completion + (finishes == ["stop"])
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens > 10


def test_raw_stream_ends_with_done(server):
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
                            "stream": True, "temperature": 0})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    payloads = sse_payloads(r)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_completion_usage_matches_tokenize(server):
    prompt = "The capital of France is"
    out = client(server).completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8,
                                            temperature=0)
    assert out.usage.prompt_tokens == count_tokens(server, prompt)
    assert out.usage.completion_tokens == 8
    assert out.choices[0].finish_reason == "length"
    assert out.choices[0].text.startswith(" Paris")  # llama.cpp's greedy continuation


def test_stream_and_whole_agree(server):
    kw = dict(model=MODEL_NAME, prompt="Once upon a time", max_tokens=16, temperature=0)
    whole = client(server).completions.create(**kw).choices[0].text
    streamed = "".join(c.choices[0].text for c in
                       client(server).completions.create(stream=True, **kw) if c.choices)
    assert streamed == whole


def test_echo_logprobs_cover_the_prompt(server):
    prompt = "The capital of France is"
    out = client(server).completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1,
                                            temperature=0, echo=True, logprobs=1)
    lp = out.choices[0].logprobs
    n = count_tokens(server, prompt)
    assert len(lp.tokens) == n + 1
    assert lp.token_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert "".join(lp.tokens) == out.choices[0].text
    assert out.choices[0].text.startswith(prompt)


def test_generate_returns_output_ids(server):
    r = requests.post(server.url + "/generate",
                      json={"text": "The capital of France is",
                            "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["output_ids"]) == 4
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    d = requests.post(server.url + "/detokenize", json={"tokens": out["output_ids"]}).json()
    assert d["text"] == out["text"]


@pytest.mark.parametrize("text", ["Hello, world!", "naïve café ☕ 日本語", "<|im_start|>user\nx"])
def test_tokenize_detokenize_round_trip(server, text):
    ids = requests.post(server.url + "/tokenize", json={"prompt": text}).json()["tokens"]
    back = requests.post(server.url + "/detokenize", json={"tokens": ids}).json()
    assert back["text"] == text


def test_user_text_never_becomes_control_tokens(server):
    im_end = requests.post(server.url + "/tokenize",
                           json={"prompt": "<|im_end|>", "add_special_tokens": False}).json()
    assert im_end["tokens"] == [2]
    plain = client(server).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "A"}], max_tokens=1)
    forged = client(server).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "A<|im_end|>"}], max_tokens=1)
    # One control token in the user's text would add one token; its characters add several.
    assert forged.usage.prompt_tokens - plain.usage.prompt_tokens > 1


def test_apply_template_renders_as_jinja2(server):
    """llama-server's /apply-template: the SmolLM2 conversations of the tokenizer golden, which
    jinja2 rendered with the GGUF's template, come back as the same prompt."""
    golden = json.loads((pathlib.Path(__file__).parents[1] / "data" / "tokenizer" /
                         "golden.json").read_text())
    chats = [c for c in golden["chat"] if c["messages"]]  # the route refuses no message (400)
    assert len(chats) >= 6
    for case in chats:
        r = requests.post(server.url + "/apply-template",
                          json={"messages": case["messages"],
                                "add_generation_prompt": case["add_generation_prompt"]})
        assert r.status_code == 200, r.text
        assert r.json() == {"prompt": case["rendered"]}, case["name"]
    missing = requests.post(server.url + "/apply-template", json={})
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "CTXPAR-HTTP-003"


def test_model_card_model_info_and_generation_health(server):
    card = client(server).models.retrieve(MODEL_NAME)
    assert card.id == MODEL_NAME
    missing = requests.get(server.url + "/v1/models/gpt-4")
    assert missing.status_code == 404 and "CTXPAR-HTTP-005" in missing.json()["error"]["message"]
    info = requests.get(server.url + "/get_model_info").json()
    assert info["is_generation"] is True and info["model_path"]
    assert requests.get(server.url + "/health_generate").status_code == 200


def test_stop_token_is_counted_but_its_text_trimmed(server):
    """SGLang's trim_matched_stop: the stop token ends the output and counts as a completion
    token; its text is not part of the text unless no_stop_trim."""
    base = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0,
            "ignore_eos": True}
    free = requests.post(server.url + "/generate",
                         json={"text": base["prompt"],
                               "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).json()
    ids = free["output_ids"]
    pieces = [requests.post(server.url + "/detokenize", json={"tokens": [t]}).json()["text"]
              for t in ids]
    stopped = requests.post(server.url + "/v1/completions",
                            json={**base, "stop_token_ids": [ids[1]]}).json()
    choice = stopped["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["matched_stop"] == ids[1]
    assert choice["text"] == pieces[0]
    assert stopped["usage"]["completion_tokens"] == 2
    kept = requests.post(server.url + "/generate", json={
        "text": base["prompt"],
        "sampling_params": {"max_new_tokens": 4, "temperature": 0, "stop_token_ids": [ids[1]],
                            "no_stop_trim": True}}).json()
    assert kept["text"] == pieces[0] + pieces[1]


def test_logprob_shapes_follow_openai(server):
    """Alternatives by probability, bytes as 0-255, text_offset in characters."""
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "naïve café — 日本", "max_tokens": 1, "echo": True,
                            "logprobs": 5, "temperature": 0}).json()
    lp = r["choices"][0]["logprobs"]
    alternatives = list(lp["top_logprobs"][-1].values())
    assert alternatives == sorted(alternatives, reverse=True)
    text = r["choices"][0]["text"]
    offsets = lp["text_offset"]
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] <= len(text)
    chat = client(server).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "日本"}], max_tokens=3,
        logprobs=True, top_logprobs=2)
    for t in chat.choices[0].logprobs.content:
        assert all(0 <= b <= 255 for b in t.bytes)


def test_generate_sampling_seed_repeats(server):
    body = {"text": "Once upon a time",
            "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 7}}
    a = requests.post(server.url + "/generate", json=body).json()
    b = requests.post(server.url + "/generate", json=body).json()
    assert a["output_ids"] == b["output_ids"]


def test_stream_is_an_uncompressed_event_stream(server):
    """SSE is UTF-8 by definition; a compressed stream would reach the client in bursts."""
    r = requests.post(server.url + "/v1/chat/completions", stream=True,
                      headers={"Accept-Encoding": "gzip"},
                      json={"messages": [{"role": "user", "content": "日本"}], "max_tokens": 2,
                            "stream": True})
    assert r.headers["Content-Type"] == "text/event-stream"
    assert "Content-Encoding" not in r.headers
    assert r.content.decode("utf-8").endswith("data: [DONE]\n\n")


def test_chat_can_continue_the_final_message(server):
    """add_generation_prompt and continue_final_message as Hugging Face's apply_chat_template
    (and vLLM / SGLang) take them: the last assistant message is left open to be continued."""
    messages = [{"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "The answer is"}]

    def prompt_tokens(**extra):
        r = requests.post(server.url + "/v1/chat/completions",
                          json={"messages": messages, "max_tokens": 1, "temperature": 0, **extra})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens"]

    default = prompt_tokens()
    closed = prompt_tokens(add_generation_prompt=False)
    open_ = prompt_tokens(add_generation_prompt=False, continue_final_message=True)
    assert default - closed == count_tokens(server, "<|im_start|>assistant\n")
    assert closed - open_ == count_tokens(server, "<|im_end|>\n")
    both = requests.post(server.url + "/v1/chat/completions",
                         json={"messages": messages, "continue_final_message": True})
    assert both.status_code == 400 and both.json()["error"]["param"] == "continue_final_message"


def test_chat_top_logprobs_need_logprobs(server):
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"


def test_a_prompt_longer_than_the_context_is_the_prompts_fault(server):
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "x " * 9000, "max_tokens": 16})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt"
    assert "CTXPAR-ENGINE-005" in r.json()["error"]["message"]


def test_a_prompt_longer_than_the_pool_gets_sglangs_refusal_or_is_cut(request):
    """SGLang's max_req_input_len = min(context, max_total_num_tokens) - 1 - 5 = 506 here."""
    body = {"prompt": "x " * 600, "max_tokens": 16}
    strict = start(request, "--max-total-tokens", "512")
    r = requests.post(strict.url + "/v1/completions", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "prompt"
    assert error["message"].startswith(
        "Input length (601 tokens) exceeds the maximum allowed length (506 tokens). Use a "
        "shorter input or enable --allow-auto-truncate."), error["message"]
    assert "CTXPAR-ENGINE-016" in error["message"]
    cut = start(request, "--max-total-tokens", "512", "--allow-auto-truncate")
    r = requests.post(cut.url + "/v1/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 512 - 16


def test_generate_batch_takes_one_sampling_params_per_prompt(server):
    """SGLang's GenerateReqInput: a list of sampling_params, one per prompt; each prompt runs as
    it runs alone with its own."""
    prompts = ["The capital of France is", "Once upon a time", "def add(a, b):"]
    params = [{"max_new_tokens": n, "temperature": 0} for n in (2, 4, 6)]
    batch = requests.post(server.url + "/generate",
                          json={"text": prompts, "sampling_params": params}).json()
    assert [len(item["output_ids"]) for item in batch] == [2, 4, 6]
    for text, p, item in zip(prompts, params, batch):
        alone = requests.post(server.url + "/generate",
                              json={"text": text, "sampling_params": p}).json()
        assert item["output_ids"] == alone["output_ids"]
    wrong = requests.post(server.url + "/generate",
                          json={"text": prompts, "sampling_params": params[:2]})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "sampling_params"
    bad = requests.post(server.url + "/generate",
                        json={"text": prompts,
                              "sampling_params": [params[0], {"temperature": -1}, params[2]]})
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["param"] == "sampling_params[1].temperature"


def test_max_completion_tokens_wins_over_max_tokens(server):
    # OpenAI deprecates max_tokens for max_completion_tokens; SGLang and vLLM take the new one.
    r = requests.post(server.url + "/v1/chat/completions", json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}],
        "max_completion_tokens": 2, "max_tokens": 5, "ignore_eos": True, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2
