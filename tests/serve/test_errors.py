"""Bad input and faults: OpenAI's error object with the field and the catalog ID (400, 404, 405,
413), the API key (401; /health, /v1/models and /metrics stay open), a full queue (503)."""

import concurrent.futures
import json
import os
import re
import socket
import subprocess
import time

import openai
import pytest
import requests

from conftest import MODEL_NAME, start


def post(server, path, body, **kw):
    if isinstance(body, str):
        return requests.post(server.url + path, data=body,
                             headers={"Content-Type": "application/json", **kw.get("headers", {})})
    return requests.post(server.url + path, json=body, **kw)


def check_error(r, status, param, catalog_id, type_="invalid_request_error"):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == type_
    assert err["param"] == param
    assert catalog_id in err["message"]
    return err


@pytest.mark.parametrize("body,param,catalog_id", [
    ('{"prompt": "a", ', None, "CTXPAR-HTTP-001"),
    ({"prompt": "a", "max_tokens": "16"}, "max_tokens", "CTXPAR-HTTP-002"),
    ({"prompt": "a", "stream": "yes"}, "stream", "CTXPAR-HTTP-002"),
    ({"max_tokens": 4}, "prompt", "CTXPAR-HTTP-003"),
    ({"prompt": "a", "n": 0}, "n", "CTXPAR-HTTP-004"),
    ({"prompt": "a", "temperature": -1}, "temperature", "CTXPAR-SAMPLING-001"),
    ({"prompt": "a", "top_p": 1.5}, "top_p", "CTXPAR-SAMPLING-001"),
    ({"prompt": "a", "max_tokens": -2}, "max_tokens", "CTXPAR-SAMPLING-001"),
    ({"prompt": "a", "stop_token_ids": [10 ** 6]}, "stop_token_ids", "CTXPAR-SAMPLING-002"),
    ({"prompt": [49152]}, "prompt", "CTXPAR-ENGINE-010"),
    ({"prompt": "a", "max_tokens": 10 ** 6}, "max_tokens", "CTXPAR-ENGINE-005"),
    ({"prompt": "a", "logit_bias": {"5": 1}}, "logit_bias", "CTXPAR-HTTP-007"),
    ('{"prompt": "a", "temperature": 1e400}', None, "CTXPAR-HTTP-001"),
    ({"prompt": ""}, "prompt", "CTXPAR-ENGINE-011"),
    ({"prompt": "a", "regex": "a+"}, "regex", "CTXPAR-HTTP-007"),
    ({"prompt": "a", "min_tokens": 2}, "min_tokens", "CTXPAR-HTTP-007"),
])
def test_bad_completion_requests(server, body, param, catalog_id):
    check_error(post(server, "/v1/completions", body), 400, param, catalog_id)


def test_bad_chat_requests(server):
    check_error(post(server, "/v1/chat/completions", {"messages": "hi"}), 400, "messages",
                "CTXPAR-HTTP-002")
    check_error(post(server, "/v1/chat/completions",
                     {"messages": [{"role": "function", "content": "x"}]}),
                400, "messages[0].role", "CTXPAR-HTTP-004")


def test_unknown_model_is_404_through_the_client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(model="gpt-4", prompt="a", max_tokens=1)
    assert e.value.body["code"] == "model_not_found"
    assert "CTXPAR-HTTP-005" in e.value.body["message"]


def test_unknown_route_is_404(server):
    r = requests.get(server.url + "/v1/nope")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "not_found_error"


def test_http_layer_refusals_say_what_and_why(server):
    wrong_method = requests.get(server.url + "/v1/completions")
    err = check_error(wrong_method, 405, None, "CTXPAR-HTTP-012")
    assert wrong_method.headers["Allow"] == "POST"
    assert "a GET request to /v1/completions" in err["message"]
    huge = requests.post(server.url + "/v1/completions", data=b"a" * (65 << 20),
                         headers={"Content-Type": "application/json"})
    check_error(huge, 413, None, "CTXPAR-HTTP-012")
    # curl -d sends JSON as application/x-www-form-urlencoded; httplib's own reading refused
    # such a body over 8 KiB with a 413 that blamed 64 MiB. The body is JSON whatever its type.
    long_text = json.dumps({"prompt": "a " * 6000})
    form = requests.post(server.url + "/tokenize", data=long_text,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 200, form.text
    assert form.json()["count"] > 5000
    multipart = requests.post(server.url + "/v1/completions", files={"prompt": "a"})
    err = check_error(multipart, 415, None, "CTXPAR-HTTP-012")
    assert "multipart/form-data" in err["message"]
    # No Content-Length and no Transfer-Encoding: an empty body (RFC 9112, 6.3), refused as not
    # JSON at once; httplib used to wait for a body until its 5 s read timeout.
    with socket.create_connection(("127.0.0.1", server.port), timeout=3) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), reply
    assert json.loads(payload)["error"]["code"] == "CTXPAR-HTTP-001"
    # The same to a route of another method, or to no route: 405 or 404 at once, not after
    # httplib's 5 s wait for a body.
    for path, status, allow in (("/v1/models", 405, b"Allow: GET"), ("/nowhere", 404, None)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=3) as s:
            s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        head, _, payload = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d" % status), reply
        assert allow is None or allow in head, reply
        assert json.loads(payload)["error"]["code"] == "CTXPAR-HTTP-012"
    check_error(post(server, "/detokenize", {"tokens": [1, 49152]}), 400, "tokens[1]",
                "CTXPAR-HTTP-004")
    check_error(post(server, "/generate", {"text": "a", "input_ids": [1]}), 400, "input_ids",
                "CTXPAR-HTTP-004")


@pytest.fixture(scope="module")
def keyed(request):
    return start(request, "--api-key", "s3cret", "--enable-metrics")


def test_api_key(keyed):
    assert requests.get(keyed.url + "/health").status_code == 200
    assert requests.get(keyed.url + "/v1/models").status_code == 200
    assert requests.get(keyed.url + "/metrics").status_code == 200  # Prometheus scrapes, as SGLang
    assert requests.get(keyed.url + "/health_generate").status_code == 200  # every /health*
    lower = post(keyed, "/tokenize", {"prompt": "a"}, headers={"Authorization": "bearer s3cret"})
    assert lower.status_code == 200  # the scheme is case-insensitive (RFC 7235)
    r = post(keyed, "/v1/completions", {"prompt": "a", "max_tokens": 1})
    err = check_error(r, 401, None, "CTXPAR-HTTP-006", "authentication_error")
    assert err["code"] == "invalid_api_key"
    bad = post(keyed, "/v1/completions", {"prompt": "a", "max_tokens": 1},
               headers={"Authorization": "Bearer wrong"})
    assert bad.status_code == 401
    c = openai.OpenAI(base_url=keyed.url + "/v1", api_key="s3cret", max_retries=0)
    assert c.completions.create(model=MODEL_NAME, prompt="a", max_tokens=1).usage.completion_tokens == 1
    wrong = openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model=MODEL_NAME, prompt="a", max_tokens=1)


@pytest.fixture(scope="module")
def small_queue(request):
    return start(request, "--max-running-requests", "1", "--max-queued-requests", "1",
                 metrics=False)


def test_full_queue_is_503(small_queue):
    body = {"prompt": "Count: one two three", "max_tokens": 48, "ignore_eos": True}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: post(small_queue, "/v1/completions", body), range(8)))
    statuses = sorted(r.status_code for r in codes)
    assert 200 in statuses and 503 in statuses, statuses
    refused = next(r for r in codes if r.status_code == 503)
    check_error(refused, 503, None, "CTXPAR-ENGINE-007", "unavailable_error")
    # More choices than the queue holds can never be taken: 400, not a retryable 503.
    check_error(post(small_queue, "/v1/completions", {"prompt": "a", "max_tokens": 1, "n": 2}),
                400, "n", "CTXPAR-HTTP-004")


def test_port_in_use_fails_at_once(server):
    r = subprocess.run([os.environ["CTXPAR_BIN"], "serve", "--model-path",
                        os.environ["CTXPAR_MODEL"], "--port", str(server.port)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "CTXPAR-HTTP-011" in r.stderr
    assert requests.get(server.url + "/health").status_code == 200


def test_metrics_off_is_404_saying_how_to_turn_them_on(small_queue):
    err = check_error(requests.get(small_queue.url + "/metrics"), 404, None, "CTXPAR-HTTP-012",
                      "not_found_error")
    assert "--enable-metrics" in err["message"]


@pytest.fixture(scope="module")
def narrow(request):
    return start(request, "--max-running-requests", "2", "--enable-metrics")


def test_probes_answer_while_many_requests_are_open(narrow):
    # Each open stream holds an HTTP thread. With a fixed pool (running + 64 + 8 threads) the
    # 75th open request and every probe after it waited for a thread: /health timed out on a
    # server that was busy, not dead. Threads now start as connections need them.
    body = json.dumps({"model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 300,
                       "ignore_eos": True, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    socks = []
    try:
        for _ in range(150):
            s = socket.create_connection(("127.0.0.1", narrow.port))
            s.sendall(head + body)
            socks.append(s)
        queued = 0.0
        for _ in range(100):  # until the requests beyond the old pool are in the engine's queue
            assert requests.get(narrow.url + "/health", timeout=10).status_code == 200
            metrics = requests.get(narrow.url + "/metrics", timeout=10).text
            queued = next(float(line.split()[-1]) for line in metrics.splitlines()
                          if line.startswith("sglang:num_queue_reqs"))
            if queued > 75:
                break
            time.sleep(0.1)
        assert queued > 75
    finally:
        for s in socks:
            s.close()


def test_bad_decode_log_interval_fails_at_once():
    r = subprocess.run([os.environ["CTXPAR_BIN"], "serve", "--model-path",
                        os.environ["CTXPAR_MODEL"], "--port", "0", "--decode-log-interval", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "CTXPAR-HTTP-009" in r.stderr and "--decode-log-interval" in r.stderr


def test_steps_are_logged_as_sglang_logs_them(request):
    s = start(request, "--decode-log-interval", "3")
    r = requests.post(s.url + "/v1/completions", json={
        "model": MODEL_NAME, "prompt": "Once upon a time", "max_tokens": 7, "ignore_eos": True})
    assert r.status_code == 200, r.text
    prompt = r.json()["usage"]["prompt_tokens"]
    stamp = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] "
    lines = s.output().splitlines()
    prefill = [l for l in lines if "Prefill batch." in l]
    decode = [l for l in lines if "Decode batch." in l]
    # One prefill step; the first token comes from it, the other 6 from decode steps, of which
    # every third is logged.
    assert len(prefill) == 1 and len(decode) == 2, lines
    assert re.match(stamp + rf"Prefill batch\. #new-seq: 1, #new-token: {prompt}, token usage: "
                    r"0\.\d\d, #running-req: 0, #queue-req: 0$", prefill[0]), prefill
    for line in decode:
        assert re.match(stamp + r"Decode batch\. #running-req: 1, #token: \d+, token usage: "
                        r"0\.\d\d, gen throughput \(token/s\): \d+\.\d\d, #queue-req: 0$", line)
