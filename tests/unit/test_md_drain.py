"""controllers.modeldeployment.drain: the preStop hook runs and returns on the second idle read
(model-deployment.md §9.7), and only managed roles carry it."""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from controllers.modeldeployment import drain
from controllers.modeldeployment.render import render_role
from tests.net import serving_thread
from tests.unit.md_fixtures import context, deployment, role


class Metrics(BaseHTTPRequestHandler):
    pages: list[str] = []
    reads = 0

    def do_GET(self) -> None:
        cls = type(self)
        page = cls.pages[min(cls.reads, len(cls.pages) - 1)]
        cls.reads += 1
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def hook(scheme: str, port: int, grace: int) -> list[str]:
    return drain.pre_stop("vLLM", scheme, port, grace)["preStop"]["exec"]["command"]


def run_hook(pages: list[str]) -> tuple[int, int]:
    Metrics.pages, Metrics.reads = pages, 0
    server = HTTPServer(("127.0.0.1", 0), Metrics)
    thread = serving_thread(server)
    thread.start()
    try:
        command = drain.pre_stop("vLLM", "http", server.server_address[1], 60)["preStop"]["exec"]["command"]
        done = subprocess.run([sys.executable, *command[1:]], timeout=60, capture_output=True, text=True)
    finally:
        server.shutdown()
    return done.returncode, Metrics.reads


def test_returns_on_the_second_idle_read() -> None:
    busy = '# HELP x\nvllm:num_requests_running{model_name="m"} 2.0\nvllm:num_requests_waiting{model_name="m"} 0.0\n'
    idle = 'vllm:num_requests_running{model_name="m"} 0.0\nvllm:num_requests_waiting{model_name="m"} 0.0\nother 5\n'
    code, reads = run_hook([busy, busy, idle, "garbage page", idle, idle])
    assert code == 0
    assert reads == 6  # two busy, one idle, one unparsable (busy), then two idle in a row


def test_only_managed_roles_drain() -> None:
    ctx = context(deployment(role(), role("own", command=["x"])))
    managed, own = (render_role(ctx, r) for r in ctx.md.roles)
    main = managed.spec["containers"][0]
    assert main["lifecycle"]["preStop"]["exec"]["command"][:2] == ["python3", "-c"]
    assert "lifecycle" not in own.spec["containers"][0]


def test_a_dead_engine_ends_the_hook_instead_of_polling_until_the_grace_runs_out() -> None:
    """Nothing listens on the port: ``urlopen`` raises ``URLError`` wrapping the refusal, which ends
    the hook.  With an hour's grace, a hook that took the refusal for a busy read would poll for
    55 minutes, far past the subprocess timeout."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    command = hook("http", port, 3600)
    done = subprocess.run([sys.executable, *command[1:]], timeout=60, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


class Plain(socketserver.BaseRequestHandler):
    """Answers every connection with plain HTTP, whatever it is sent (a TLS hello included)."""

    connections = 0

    def handle(self) -> None:
        type(self).connections += 1
        self.request.recv(4096)
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def test_a_tls_failure_ends_the_hook_on_its_first_read() -> None:
    """An https hook meeting a plain-HTTP listener fails the handshake (``URLError`` wrapping an
    ``SSLError``): one connection, then the hook returns."""
    Plain.connections = 0
    server = socketserver.TCPServer(("127.0.0.1", 0), Plain)
    thread = serving_thread(server)
    thread.start()
    try:
        command = hook("https", server.server_address[1], 60)
        done = subprocess.run([sys.executable, *command[1:]], timeout=60, capture_output=True, text=True)
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert Plain.connections == 1
