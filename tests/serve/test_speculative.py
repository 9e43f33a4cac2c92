"""Speculative decoding through the server: /generate answers a repetitive prompt with the same
output ids and log-probabilities with --speculative-algorithm NGRAM, and with STANDALONE and the
model as its own draft, as without; meta_info has SGLang's spec_verify_ct and spec_accept_length,
/metrics sglang:spec_accept_length, and the step log's decode lines the accept length and rate; a
finished request drafts for the next one (the shared n-gram cache)."""

import os

import pytest
import requests

from conftest import start

LEDGER = (
    "Deliveries ledger, March 2024\n"
    "2024-03-01 | Warehouse A | 12 crates of apples | received by J. Smith | status: complete\n"
    "2024-03-02 | Warehouse B | 8 crates of pears | received by J. Smith | status: complete\n"
    "2024-03-03 | Warehouse A | 15 crates of apples | received by M. Jones | status: complete\n"
    "2024-03-04 | Warehouse C | 6 crates of plums | received by J. Smith | status: complete\n"
    "2024-03-05 |")


def generate(server):
    body = {"text": LEDGER, "return_logprob": True, "top_logprobs_num": 2,
            "sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    r.raise_for_status()
    return r.json()


@pytest.fixture(scope="module")
def plain(request):
    server = start(request)
    return server, generate(server)


def test_ngram_answers_as_plain_decoding_and_reports_its_acceptance(request, plain):
    plain, a = plain
    spec = start(request, "--speculative-algorithm", "NGRAM", "--decode-log-interval", "1")
    b = generate(spec)
    assert a["output_ids"] == b["output_ids"]
    assert a["meta_info"]["output_token_logprobs"] == b["meta_info"]["output_token_logprobs"]
    assert a["meta_info"]["output_top_logprobs"] == b["meta_info"]["output_top_logprobs"]
    assert "spec_verify_ct" not in a["meta_info"]
    meta = b["meta_info"]
    # The first token comes from the prefill, the other 47 from verify steps that accepted drafts.
    assert 0 < meta["spec_verify_ct"] < 47
    assert abs(meta["spec_accept_length"] - 47 / meta["spec_verify_ct"]) < 1e-9
    assert spec.metrics()["sglang:spec_accept_length"] > 1.5
    assert plain.metrics()["sglang:spec_accept_length"] == 0
    assert "accept len: " in spec.output() and "accept rate: " in spec.output()


def test_standalone_answers_as_plain_decoding_and_reports_its_acceptance(request, plain):
    # The model drafting for itself at tp 1: its greedy drafts are what the target samples.
    _, a = plain
    spec = start(request, "--speculative-algorithm", "STANDALONE",
                 "--speculative-draft-model-path", os.environ["CTXPAR_MODEL"],
                 "--speculative-num-steps", "4")
    b = generate(spec)
    assert a["output_ids"] == b["output_ids"]
    assert a["meta_info"]["output_token_logprobs"] == b["meta_info"]["output_token_logprobs"]
    assert a["meta_info"]["output_top_logprobs"] == b["meta_info"]["output_top_logprobs"]
    meta = b["meta_info"]
    assert 0 < meta["spec_verify_ct"] < 47
    assert abs(meta["spec_accept_length"] - 47 / meta["spec_verify_ct"]) < 1e-9
    assert spec.metrics()["sglang:spec_accept_length"] > 1.5


def test_a_finished_request_drafts_for_the_next(request):
    # A text that hardly repeats itself: its own tokens draft little. The second request of the
    # same prompt drafts from the first one's prompt and output (the shared n-gram cache).
    spec = start(request, "--speculative-algorithm", "NGRAM")
    body = {"text": "The history of the lighthouse on the northern island began in",
            "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": True}}
    first, second = (requests.post(spec.url + "/generate", json=body, timeout=300).json()
                     for _ in range(2))
    assert first["output_ids"] == second["output_ids"]
    assert first["meta_info"]["spec_accept_length"] < 1.5
    assert second["meta_info"]["spec_accept_length"] > 2
    # /flush_cache empties it with the prefix cache.
    requests.post(spec.url + "/flush_cache", timeout=60).raise_for_status()
    third = requests.post(spec.url + "/generate", json=body, timeout=300).json()
    assert third["output_ids"] == first["output_ids"]
    assert third["meta_info"]["spec_accept_length"] < 1.5
    off = start(request, "--speculative-algorithm", "NGRAM", "--speculative-ngram-capacity", "1")
    _, again = (requests.post(off.url + "/generate", json=body, timeout=300).json()
                for _ in range(2))
    assert again["meta_info"]["spec_accept_length"] < 1.5
