"""A real gateway on a unix socket (TLS, uvicorn, a thread) for the HTTP tests, and a client."""

from __future__ import annotations

import argparse
import contextlib
import queue
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.manager import Settings
from gateway.options import Options, add_arguments, validate
from gateway.serve import Served, prepare

# Short retries; ``sync_wait`` is only an upper bound on a first listing (a loaded lane took over
# 3 s once, and the late listing then replayed as ADDED lines a test expected never to see).
FAST = Settings(readiness_timeout=2.0, resync=3600, first_delay=0.05, max_delay=0.2, sync_wait=20.0)


def options(*args: str) -> Options:
    """The checked options of ``worker-gateway <args>``."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return validate(parser.parse_args(list(args)))


class Running:
    def __init__(self, served: Served, socket_path: str | None) -> None:
        self.served = served
        self.socket_path = socket_path
        self.thread = threading.Thread(target=served.run, daemon=True)
        self.clients: list[httpx.Client] = []

    def start(self, timeout: float = 20) -> Running:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.client().get("/readyz").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError("the gateway did not become ready")

    def client(self, timeout: float = 10) -> httpx.Client:
        transport = httpx.HTTPTransport(uds=self.socket_path, verify=False)
        client = httpx.Client(transport=transport, base_url="https://gpustack-operator", timeout=timeout)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:  # idle keep-alive connections would hold up a graceful stop
            client.close()
        self.served.server.should_exit = True
        self.thread.join(15)


def serve_unix(socket_path: Path, *args: str, settings: Settings = FAST) -> Running:
    served = prepare(options("--bind-unix-path", str(socket_path), *args), settings=settings)
    return Running(served, str(socket_path)).start()


class Watch:
    """A watch read on a thread: its lines arrive in ``lines`` (None once the stream ended)."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.status = 0
        self.headers: httpx.Headers | None = None
        self._client = client
        self._url = url
        self._opened = threading.Event()
        self._response: httpx.Response | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._opened.wait(10):
            raise AssertionError(f"watch {url} did not open")

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self._url, timeout=httpx.Timeout(10, read=None)) as response:
                self._response = response
                self.status = response.status_code
                self.headers = response.headers
                self._opened.set()
                for text in response.iter_lines():
                    if text:
                        self.lines.put(orjson.loads(text))
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()
            self.lines.put(None)

    def next(self, timeout: float = 10) -> dict[str, Any] | None:
        return self.lines.get(timeout=timeout)

    def until(self, predicate: Any, timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError("the watch ended")
            if predicate(line):
                return line

    def quiet(self, seconds: float = 0.3) -> bool:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            return True
        self.lines.put(line)
        return False

    def close(self) -> None:
        """Leave: shut the connection down under the reader, as a client that goes away does.

        The client is closed only once the reader has let go of the stream: closed under a reader
        still inside OpenSSL, the descriptor can be reused at once by the caller's next connection,
        and the reader's TLS close then lands on that connection (a fresh request failed with
        EPIPE in the gateway e2e that way)."""
        if self._response is not None:
            stream = self._response.extensions.get("network_stream")
            raw = stream.get_extra_info("socket") if stream is not None else None
            if raw is not None:
                with contextlib.suppress(OSError):
                    raw.shutdown(socket.SHUT_RDWR)
        self._reader.join(timeout=10)
        self._client.close()


def lines(watch: Watch) -> Iterator[dict[str, Any]]:
    while (line := watch.next()) is not None:
        yield line
