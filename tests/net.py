"""Small network helpers the TLS tests share: a free loopback port, the serial a server presents,
an app served over TLS by the worker's own server class."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography import x509


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_serial(port: int, ca: str) -> int:
    """The serial number of the certificate the server on ``port`` presents, verified against ``ca``."""
    context = ssl.create_default_context(cafile=ca)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped,
    ):
        return x509.load_der_x509_certificate(wrapped.getpeercert(binary_form=True)).serial_number


# ``serve_forever`` checks for ``shutdown()`` once per poll interval (0.5 s by default), so every
# test server's teardown waited up to half a second for nothing; the delivery tests alone stop
# hundreds of them.
POLL_S = 0.02


def serving_thread(server: socketserver.BaseServer, name: str | None = None) -> threading.Thread:
    """A daemon thread (not started) running ``server.serve_forever`` with a short poll, so that
    ``server.shutdown()`` returns at once."""
    return threading.Thread(target=server.serve_forever, args=(POLL_S,), name=name, daemon=True)


@contextlib.contextmanager
def serve_tls(app: Any, directory: Path) -> Iterator[str]:
    """``app`` served by uvicorn over TLS on 127.0.0.1 (the worker's own server class); yields
    its base URL. The CA is ``directory / "ca.crt"``."""
    import uvicorn

    from certs import issue
    from webhooks import server

    issue.ensure(directory, ["localhost"], ["127.0.0.1"])
    port = free_port()
    config = server._TLSConfig(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        ssl_certfile=str(directory / "tls.crt"),
        ssl_keyfile=str(directory / "tls.key"),
        lifespan="on",
    )
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(instance.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not instance.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert instance.started, "the server did not start"
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        instance.should_exit = True
        thread.join(5)
