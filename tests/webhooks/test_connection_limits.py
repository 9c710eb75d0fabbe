"""Bounded resources per connection on a running ``worker`` (TLS): header size and count, the
request deadline (handshake, headers, idle before the first request), and the connection cap that
keeps a flood of idle connections from starving real reviews when descriptors are scarce."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from certs import issue
from tests.net import free_port
from tests.webhooks.reviews import body, pod

VALIDATE = "/validate-gpustack-worker-core-v1-pod"
GUARD = 60.0  # a failure guard for reads, not a speed requirement


@dataclass
class Worker:
    port: int
    ca: str
    process: subprocess.Popen

    def tls(self) -> ssl.SSLSocket:
        context = ssl.create_default_context(cafile=self.ca)
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=GUARD)
        return context.wrap_socket(raw, server_hostname="127.0.0.1")

    def review(self, uid: str = "r") -> dict:
        payload = body(pod(), uid=uid)
        with self.tls() as conn:
            conn.sendall(
                b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (VALIDATE.encode(), len(payload), payload)
            )
            status, answer = _read_response(conn)
        assert status == 200, answer
        return orjson.loads(answer)


def _read_response(conn: socket.socket) -> tuple[int, bytes]:
    data = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return (int(head.split(b" ")[1]) if head else 0), rest


def _closed(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    return data


def _start(tmp_path: Path, *flags: str, nofile: int | None = None) -> Iterator[Worker]:
    issue.ensure(tmp_path, ["localhost"], ["127.0.0.1"])
    (tmp_path / "objects").mkdir(exist_ok=True)
    port = free_port()

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpustack_operator",
            "worker",
            "--webhooks-only",
            "--objects",
            str(tmp_path / "objects"),
            "--cert-dir",
            str(tmp_path),
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(port),
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=limit,
    )
    worker = Worker(port, str(tmp_path / "ca.crt"), process)
    deadline = time.monotonic() + 30
    while True:
        try:
            worker.review("ready")
            break
        except OSError:
            assert process.poll() is None, process.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the worker did not answer"
            time.sleep(0.2)
    try:
        yield worker
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)


@pytest.fixture(scope="module")
def worker(tmp_path_factory) -> Iterator[Worker]:
    yield from _start(
        tmp_path_factory.mktemp("limits"),
        "--max-header-bytes",
        "8192",
        "--max-headers",
        "20",
        "--request-deadline",
        "1",
    )


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_an_oversized_header_is_refused(worker: Worker) -> None:
    with worker.tls() as conn:
        conn.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nX-Big: %s" % (VALIDATE.encode(), b"a" * 200_000))
        answer = _closed(conn)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"exceed 8192 bytes" in answer
    worker.review("after-big-header")


def test_a_128_mib_header_is_not_buffered(worker: Worker) -> None:
    before = _rss_kib(worker.process.pid)
    with worker.tls() as conn:
        conn.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nX-Big: " % VALIDATE.encode())
        try:
            for _ in range(128 * 16):  # 128 MiB in 64 KiB writes; the server stops reading early
                conn.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError):
            pass
    assert _rss_kib(worker.process.pid) - before < 32 * 1024
    worker.review("after-128-mib")


def test_too_many_header_fields_are_refused(worker: Worker) -> None:
    fields = b"".join(b"X-H%d: v\r\n" % i for i in range(21))
    with worker.tls() as conn:
        conn.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (VALIDATE.encode(), fields))
        answer = _closed(conn)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"more than 20 request header fields" in answer


def test_an_idle_connection_is_closed_at_the_deadline(worker: Worker) -> None:
    with worker.tls() as conn:
        assert _closed(conn) == b""  # closed without a word: it never asked anything


def test_an_unfinished_request_is_closed_at_the_deadline(worker: Worker) -> None:
    with worker.tls() as conn:
        conn.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: app" % VALIDATE.encode())
        answer = _closed(conn)
    assert answer.startswith(b"HTTP/1.1 408 ")
    with worker.tls() as conn:
        conn.sendall(
            b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            % VALIDATE.encode()
        )
        answer = _closed(conn)  # headers whole, body never finished
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_a_tls_handshake_that_never_starts_is_dropped(worker: Worker) -> None:
    with socket.create_connection(("127.0.0.1", worker.port), timeout=GUARD) as raw:
        assert raw.recv(1) == b""


def test_idle_connections_cannot_starve_reviews_under_a_low_descriptor_limit(tmp_path) -> None:
    # 64 descriptors in all; 150 idle TLS connections would exhaust them without the cap.
    for worker in _start(tmp_path, "--request-deadline", "60", nofile=64):
        idle = []
        try:
            for _ in range(150):
                idle.append(worker.tls())
                if len(idle) % 25 == 0:
                    assert worker.review(f"during-{len(idle)}")["response"]["allowed"] is True
            assert worker.review("after")["response"]["allowed"] is True
            closed = 0
            for conn in idle:
                conn.settimeout(0.2)
                with contextlib.suppress(TimeoutError, ssl.SSLError, ConnectionResetError):
                    closed += conn.recv(1) == b""
            assert closed >= 150 - 16  # the oldest idle ones were evicted to make room
        finally:
            for conn in idle:
                conn.close()


def test_raw_connects_that_never_handshake_cannot_exhaust_descriptors(tmp_path) -> None:
    # Connections still in their TLS handshake hold descriptors too: 150 raw connects that never
    # send a ClientHello, under 64 descriptors and a 60 s deadline, would leave no descriptor for
    # a real review unless they count against the cap from their accept.
    for worker in _start(tmp_path, "--request-deadline", "60", nofile=64):
        raw = []
        try:
            for _ in range(150):
                raw.append(socket.create_connection(("127.0.0.1", worker.port), timeout=GUARD))
                if len(raw) % 50 == 0:
                    assert worker.review(f"during-{len(raw)}")["response"]["allowed"] is True
            assert worker.review("after")["response"]["allowed"] is True
            cut = 0
            for conn in raw:
                conn.settimeout(0.2)
                with contextlib.suppress(TimeoutError, ConnectionResetError):
                    cut += conn.recv(1) == b""
            assert cut >= 150 - 16  # the oldest handshakes were cut off to make room
        finally:
            for conn in raw:
                conn.close()
