"""Small network helpers the TLS tests share: a free loopback port, the serial a server presents."""

from __future__ import annotations

import socket
import ssl

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
