"""Small network helpers the TLS tests share: a free loopback port, the serial a server presents."""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading

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
