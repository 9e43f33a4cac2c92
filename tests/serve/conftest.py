"""Starts `ctxpar serve` on the real model (CTXPAR_MODEL) for the server tests.

The binary is CTXPAR_BIN (CTest sets it). Each server listens on a free port of 127.0.0.1 and is
stopped with SIGTERM at the end of its tests, which must end it with exit status 0.
"""

import os
import signal
import socket
import subprocess
import time

import pytest
import requests

MODEL_NAME = "smollm2"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags, env=None, ready_timeout=180, model=None, metrics=True,
                 address="127.0.0.1"):
        binary = os.environ.get("CTXPAR_BIN")
        model = model or os.environ.get("CTXPAR_MODEL")
        if not binary or not model:
            pytest.fail("CTXPAR_BIN and CTXPAR_MODEL must be set (scripts/test.sh sets both)")
        self.port = free_port()
        # `address`: where rank 0 listens and the tests reach it (a namespace host's address
        # when rank 0 runs there).
        self.url = f"http://{address}:{self.port}"
        self.log_path = f"/tmp/ctxpar-serve-test-{self.port}.log"
        self.log = open(self.log_path, "w+")
        cmd = [binary, "serve", "--model-path", model, "--host", address, "--port", str(self.port),
               "--served-model-name", MODEL_NAME, *(["--enable-metrics"] if metrics else []),
               *flags]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, **(env or {})})
        deadline = time.time() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"ctxpar serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):
                pass  # not listening yet, or a loaded machine slow to answer: try again
            if time.time() > deadline:
                self.kill()
                pytest.fail(f"ctxpar serve was not ready in {ready_timeout} s:\n{self.output()}")
            time.sleep(0.2)

    def output(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout=60):
        """SIGTERM (to the whole process group: mpirun and its ranks); returns the exit status."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def metrics(self, headers=None):
        text = requests.get(self.url + "/metrics", headers=headers, timeout=10).text
        values = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0] if "_bucket" not in name else name] = float(value)
        return values


def start(request, *flags, env=None, model=None, metrics=True):
    server = Server(*flags, env=env, model=model, metrics=metrics)

    def finish():
        code = server.stop()
        assert code == 0, f"ctxpar serve exited with {code}:\n{server.output()}"

    request.addfinalizer(finish)
    return server


@pytest.fixture(scope="module")
def server(request):
    """tp 1, the default pool."""
    return start(request, "--max-running-requests", "32")
