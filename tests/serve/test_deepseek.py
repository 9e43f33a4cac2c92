"""The DeepSeek-V3 architecture behind the same server: the tiny DeepSeek-V3 reference checkpoint
(HF transformers' greedy continuations in its golden.json), which has no tokenizer, served with
DCP 2 over tp 2. Prompts as token ids reproduce the reference, alone and four at once; text
prompts and chat are refused with the catalog's reasons."""

import concurrent.futures
import json
import os

import pytest
import requests

from conftest import start

REFERENCE = os.path.join(os.environ.get("CTXPAR_REFERENCE_DIR", ""), "deepseek_v3_tiny")


@pytest.fixture(scope="module")
def golden():
    path = os.path.join(REFERENCE, "golden.json")
    if not os.path.exists(path):
        pytest.skip(f"the tiny DeepSeek-V3 reference checkpoint is absent ({REFERENCE})")
    with open(path) as f:
        return json.load(f)["prompts"]


@pytest.fixture(scope="module")
def server(request, golden):
    return start(request, "--tp-size", "2", "--dcp-size", "2", "--dcp-comm-backend", "a2a",
                 model=REFERENCE)


def generate(server, ids, n):
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                                  "ignore_eos": True}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_token_id_prompts_reproduce_the_reference(server, golden):
    for p in golden:
        out = generate(server, p["ids"], len(p["greedy_32"]))
        assert out["output_ids"] == p["greedy_32"]
        assert out["meta_info"]["prompt_tokens"] == len(p["ids"])


def test_four_at_once_are_each_the_reference(server, golden):
    with concurrent.futures.ThreadPoolExecutor(len(golden)) as pool:
        outs = list(pool.map(lambda p: generate(server, p["ids"], len(p["greedy_32"])), golden))
    for p, out in zip(golden, outs):
        assert out["output_ids"] == p["greedy_32"]


def test_text_and_chat_need_a_tokenizer(server, golden):
    r = requests.post(server.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 4})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "CTXPAR-HTTP-007"
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "CTXPAR-HTTP-008"
