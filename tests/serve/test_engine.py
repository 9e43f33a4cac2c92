"""Serving under load, against the tokens each request gets when sent alone: 32 parallel streams,
a client that disconnects (its pages return to the pool, seen in /metrics), retractions under a
tiny pool that lose nothing, tp 3 / dcp 3 serving the tokens of tp 1, and SIGTERM ending the
requests in flight with finish_reason "abort"."""

import concurrent.futures
import json
import os
import signal
import time

import requests

from conftest import start

PROMPTS = [f"Question {i}: what is {i} plus {i + 1}? Answer:" for i in range(32)]


def generate_ids(server, text, max_new_tokens, stream=False):
    body = {"text": text, "stream": stream,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                "ignore_eos": True}}
    r = requests.post(server.url + "/generate", json=body, stream=stream, timeout=600)
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()["output_ids"]
    last = None
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            last = json.loads(line[6:])
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    return last["output_ids"]


def wait_for(predicate, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_parallel_streams_match_alone(server):
    alone = [generate_ids(server, p, 8) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        together = list(pool.map(lambda p: generate_ids(server, p, 8, stream=True), PROMPTS))
    assert together == alone


def test_disconnect_frees_the_pool(server):
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "Tell a long story.", "max_tokens": 4000,
                            "ignore_eos": True, "stream": True}, stream=True, timeout=60)
    lines = r.iter_lines()
    seen = 0
    for line in lines:
        seen += line.startswith(b"data: ")
        if seen >= 3:
            break
    assert server.metrics()["sglang:num_running_reqs"] == 1
    r.close()
    assert wait_for(lambda: server.metrics()["sglang:num_running_reqs"] == 0 and
                    server.metrics()["sglang:num_used_tokens"] == 0), server.metrics()


def test_retractions_under_a_tiny_pool_lose_nothing(request, server):
    # Each request needs 4 pages of 16 tokens (about 14 prompt + 48 new tokens); the pool holds
    # 10, and admission reserves only part of the new tokens, so running requests run out.
    prompts = PROMPTS[:6]
    alone = [generate_ids(server, p, 48) for p in prompts]
    tiny = start(request, "--max-total-tokens", "160", "--page-size", "16",
                 "--max-running-requests", "6")
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda p: generate_ids(tiny, p, 48, stream=True), prompts))
    assert tiny.metrics()["sglang:num_retracted_reqs"] > 0
    assert together == alone


def test_tp3_dcp3_serves_the_tokens_of_tp1(request, server, tmp_path):
    prompts = PROMPTS[:4]
    alone = [generate_ids(server, p, 12) for p in prompts]
    # Open MPI's session directory and shared-memory segments go to a directory of this test's
    # own, which must be empty once the server has stopped.
    shm = tmp_path / "mpi"
    shm.mkdir()
    dcp = start(request, "--tp-size", "3", "--dcp-size", "3", "--threads", "1",
                env={"TMPDIR": str(shm), "OMPI_MCA_btl_vader_backing_directory": str(shm)})
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: generate_ids(dcp, p, 12, stream=True), prompts))
    assert together == alone
    info = requests.get(dcp.url + "/get_server_info").json()
    assert (info["tp_size"], info["dcp_size"]) == (3, 3)
    assert dcp.stop() == 0, dcp.output()
    left = [str(p) for p in shm.rglob("*")]
    assert not left, left


def test_sigterm_aborts_streams_and_exits_zero(request):
    s = start(request)
    r = requests.post(s.url + "/v1/completions",
                      json={"prompt": "Tell a long story.", "max_tokens": 4000,
                            "ignore_eos": True, "stream": True}, stream=True, timeout=60)
    lines = r.iter_lines()
    for line in lines:
        if line.startswith(b"data: "):
            break
    os.killpg(s.proc.pid, signal.SIGTERM)
    rest = [l for l in lines if l.startswith(b"data: ")]
    assert rest[-1] == b"data: [DONE]"
    finishes = [json.loads(l[6:])["choices"][0].get("finish_reason") for l in rest[:-1]]
    assert finishes[-1] == "abort"
    assert s.proc.wait(timeout=60) == 0, s.output()
    assert "SIGTERM: no new request" in s.output()
