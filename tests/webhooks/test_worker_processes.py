"""``worker --workers N`` serves from N uvicorn processes (the benchmark's scaling run uses it)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from certs import issue
from tests.net import free_port
from tests.webhooks.reviews import body, pod


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_two_worker_processes_serve(tmp_path, tls):
    """Over TLS the listener is the connection-counting one, which must listen on the socket the
    supervisor bound (it once never did: every worker ran and none accepted)."""
    (tmp_path / "objects").mkdir()
    port = free_port()
    if tls:
        issue.ensure(tmp_path / "certs", ["localhost"], ["127.0.0.1"])
        transport = ["--cert-dir", str(tmp_path / "certs")]
        context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
    else:
        transport, context = ["--insecure"], None
    scheme = "https" if tls else "http"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpustack_operator",
            "worker",
            "--webhooks-only",
            *transport,
            "--objects",
            str(tmp_path / "objects"),
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(port),
            "--workers",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(
                    f"{scheme}://127.0.0.1:{port}/validate-gpustack-worker-core-v1-pod",
                    data=body(pod(), uid="w2"),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    answer = orjson.loads(response.read())
                break
            except OSError:
                assert process.poll() is None, process.stdout.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.2)
        assert answer["response"] == {"uid": "w2", "allowed": True}
        children = subprocess.run(
            ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
        ).stdout.split()
        workers = [pid for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(workers) == 2
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
