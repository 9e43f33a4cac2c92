"""ctxpar across hosts: network-namespace hosts on this machine (scripts/netns-cluster.sh), MPI
over TCP between them, against the same commands on one host.

- `generate` at several (tp, dcp, backend) layouts gives the one-host tokens; shm_a2a across
  hosts is refused with CTXPAR-DCP-007.
- `serve` with rank 0 on one host and the others elsewhere answers with the one-host tokens.
- Losing a host (its processes killed, or its link taken down) ends `generate` within 10 s naming
  the rank and the host, and ends every open stream of `serve` (an error event, then [DONE]) and
  every waiting request (503) within 10 s; a link that stalls without closing trips
  --watchdog-timeout; the commands exit.

The cluster is made once for the module and removed at its end, failures included; CTest's
cleanup fixture removes it again should the interpreter itself die.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "serve"))
from conftest import Server  # noqa: E402

SCRIPT = os.path.join(os.environ["CTXPAR_SOURCE_DIR"], "scripts", "netns-cluster.sh")
BIN = os.environ["CTXPAR_BIN"]
SMOLLM2 = os.environ.get("CTXPAR_MODEL", "")
GEMMA3 = os.environ.get("CTXPAR_GEMMA3_MODEL", "")
HOSTS = ["ctxpar-h1", "ctxpar-h2", "ctxpar-h3"]
PROMPT = "The capital of France is"
# Ranks wait for one another on two shared cores: no rank may spin on a collective's completion.
BASE_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def cluster(*args, check=True):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, check=check,
                          timeout=60).stdout.strip()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    probe = subprocess.run(["bash", SCRIPT, "check"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(probe.stdout.strip() or probe.stderr.strip())
    cluster("up", "3")
    try:
        yield tmp_path_factory.mktemp("hostfiles")
    finally:
        cluster("down", check=False)


def mpirun_args(folder, slots):
    """The cluster's mpirun arguments with a hostfile of `slots` ranks per host, in host order."""
    hostfile = folder / ("hosts-" + "-".join(map(str, slots)))
    hostfile.write_text("".join(f"{h} slots={n}\n" for h, n in zip(HOSTS, slots)))
    args = cluster("args").split()
    args[args.index("--hostfile") + 1] = str(hostfile)
    return " ".join(args)


def generate(*flags, model=SMOLLM2, env=None, timeout=300, **popen):
    cmd = [BIN, "generate", "--model-path", model, "--print-ids", "--max-new-tokens", "24",
           "--temperature", "0", "--kv-cache-mib", "16", *flags, PROMPT]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **BASE_ENV, **(env or {})}, **popen)


def ids(result):
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.fixture(scope="module")
def one_host():
    """The one-host tokens of each model (tp 1), which every layout must give."""
    if not SMOLLM2:
        pytest.skip("CTXPAR_MODEL is not set (scripts/test.sh fetches SmolLM2)")
    return {SMOLLM2: ids(generate()), GEMMA3: ids(generate(model=GEMMA3)) if GEMMA3 else None}


LAYOUTS = [
    # (model, slots per host, flags)
    ("smollm2", (1, 1, 1), ["--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "a2a"]),
    ("smollm2", (2, 1), ["--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "ag_rs"]),
    ("smollm2", (1, 2), ["--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "a2a",
                         "--dcp-replicate-q-proj"]),
    ("smollm2", (1, 1, 1), ["--tp-size", "3", "--dcp-size", "1"]),
    ("gemma3", (1, 1), ["--tp-size", "2", "--dcp-size", "2", "--dcp-comm-backend", "a2a"]),
]


@pytest.mark.parametrize("model,slots,flags", LAYOUTS)
def test_generate_across_hosts_gives_the_one_host_tokens(hosts, one_host, model, slots, flags):
    path = SMOLLM2 if model == "smollm2" else GEMMA3
    if not path:
        pytest.skip(f"{model} is not downloaded")
    across = generate(*flags, model=path, env={"CTXPAR_MPIRUN_ARGS": mpirun_args(hosts, slots)})
    assert ids(across) == one_host[path]


def test_shm_a2a_across_hosts_is_refused(hosts, one_host):
    r = generate("--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "shm_a2a",
                 env={"CTXPAR_MPIRUN_ARGS": mpirun_args(hosts, (2, 1))})
    assert r.returncode == 2, r.stderr
    assert "run: ctxpar explain CTXPAR-DCP-007" in r.stderr


@pytest.mark.parametrize("lose,code", [
    (lambda: cluster("kill", "ctxpar-h3"), "CTXPAR-RUN-003"),
    (lambda: cluster("link", "ctxpar-h3", "down"), "CTXPAR-RUN-004"),
], ids=["killed", "link-down"])
def test_generate_ends_within_10_s_naming_the_lost_host(hosts, one_host, lose, code):
    env = {**os.environ, **BASE_ENV, "CTXPAR_MPIRUN_ARGS": mpirun_args(hosts, (1, 1, 1))}
    # Text, which rank 0 writes as it is generated (ids are printed at the end).
    cmd = [BIN, "generate", "--model-path", SMOLLM2, "--tp-size", "3", "--dcp-size", "3",
           "--max-new-tokens", "4000", "--ignore-eos", "--kv-cache-mib", "128", PROMPT]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        assert proc.stdout.read(32), "no token before the host was lost"
        lost = time.time()
        lose()
        _, err = proc.communicate(timeout=10)
        took = time.time() - lost
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        cluster("link", "ctxpar-h3", "up")
        for host in HOSTS:
            cluster("kill", host)
    assert proc.returncode != 0
    assert took < 10, took
    err = err.decode()
    assert "Rank 2 (pid" in err and "host ctxpar-h3)" in err, err
    assert f"run: ctxpar explain {code}" in err, err


def kill_everything(server):
    """What is left of a failed server: its launcher, and every process of the hosts."""
    server.kill()
    for host in HOSTS:
        cluster("kill", host)


def stream(server, body, events, ready):
    r = requests.post(server.url + "/v1/completions", json={**body, "stream": True}, stream=True,
                      timeout=60)
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            events.append(line[6:])
            ready.set()
    ready.set()


def serve_across(hosts, *flags, slots=(1, 1, 1),
                 layout=("--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "a2a")):
    address = cluster("addr", HOSTS[0])
    return Server(*layout, "--kv-cache-mib", "128", *flags, address=address, metrics=False,
                  env={**BASE_ENV, "CTXPAR_MPIRUN_ARGS": mpirun_args(hosts, slots)})


@pytest.mark.parametrize("slots,layout", [
    ((1, 1, 1), ("--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "a2a")),
    ((2, 1), ("--tp-size", "3", "--dcp-size", "3", "--dcp-comm-backend", "ag_rs")),
], ids=["a2a-1-1-1", "ag_rs-2-1"])
def test_serve_across_hosts_gives_the_one_host_tokens(hosts, one_host, slots, layout):
    server = serve_across(hosts, slots=slots, layout=layout)
    try:
        r = requests.post(server.url + "/generate",
                          json={"text": PROMPT, "sampling_params": {"max_new_tokens": 24,
                                                                     "temperature": 0}},
                          timeout=120)
        assert r.status_code == 200, r.text
        assert [str(t) for t in r.json()["output_ids"]] == one_host[SMOLLM2]
    finally:
        assert server.stop() == 0, server.output()


def ends_every_request(server, fail, code):
    """A stream and a waiting request open, fail(): both end with `code` within 10 s, and the
    server exits."""
    body = {"prompt": "Tell a long story.", "max_tokens": 4000, "ignore_eos": True}
    events, ready = [], threading.Event()
    streamer = threading.Thread(target=stream, args=(server, body, events, ready))
    streamer.start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        plain = pool.submit(requests.post, server.url + "/v1/completions", json=body, timeout=60)
        assert ready.wait(60) and events, "the stream did not start"
        began = time.time()
        fail()
        streamer.join(10)
        assert not streamer.is_alive(), "the stream was not ended within 10 s"
        reply = plain.result(timeout=max(0.1, 10 - (time.time() - began)))
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == code and f"ctxpar explain {code}" in error["message"], error
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == code
    assert server.proc.wait(timeout=20) != 0
    return error


def test_serve_tells_every_request_when_a_host_is_lost(hosts, one_host):
    server = serve_across(hosts)
    try:
        error = ends_every_request(server, lambda: cluster("kill", "ctxpar-h3"), "CTXPAR-RUN-003")
        assert "Rank 2" in error["message"] and "ctxpar-h3" in error["message"], error
    finally:
        kill_everything(server)


def test_a_stalled_link_trips_the_watchdog(hosts, one_host):
    server = serve_across(hosts, "--watchdog-timeout", "3")
    try:
        ends_every_request(server, lambda: cluster("link", "ctxpar-h3", "down"),
                           "CTXPAR-ENGINE-014")
        assert "ctxpar serve: An engine step has run" in server.output()
    finally:
        cluster("link", "ctxpar-h3", "up")
        kill_everything(server)
