"""A forward HTTP proxy for tests: ``CONNECT`` tunnels and absolute-form ``GET``/``HEAD``, each
recorded (method and target host, never a header), so a test sees which requests went through it."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tests.net import serving_thread

_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "trailers", "upgrade"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        self.server.record("CONNECT", self.path)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection Established")
        self.end_headers()
        self.close_connection = True
        sockets = [self.connection, upstream]
        with upstream:
            while True:
                readable, _, _ = select.select(sockets, [], [], 30)
                if not readable:
                    return
                for sock in readable:
                    data = sock.recv(1 << 16)
                    if not data:
                        return
                    (upstream if sock is self.connection else self.connection).sendall(data)

    def _forward(self) -> None:
        url = urlsplit(self.path)
        self.server.record(self.command, url.netloc)
        connection = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        target = url.path + (f"?{url.query}" if url.query else "")
        try:
            connection.request(self.command, target, headers=headers)
            response = connection.getresponse()
            body = response.read()
        except OSError:
            self.send_error(502)
            return
        finally:
            connection.close()
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP and key.lower() != "transfer-encoding":
                self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = _forward
    do_HEAD = _forward


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def record(self, method: str, target: str) -> None:
        with self.lock:
            self.requests.append((method, target))


class ForwardProxy:
    def __init__(self) -> None:
        self._server = _Server()
        self._thread = serving_thread(self._server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        with self._server.lock:
            return list(self._server.requests)

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        with contextlib.suppress(OSError):
            self._server.server_close()
