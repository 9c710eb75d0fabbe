"""A simulated external topology inventory: an HTTPS server answering the webhook arm's ``GET``.

What it answers is set per test (``server.answer``): a snapshot, a redirect, a body larger than
the read bound, a slow drip, or nothing at all.  It checks the bearer token or the client
certificate the way an inventory service would, and records what each request carried.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.net import serving_thread


@dataclass
class Pki:
    """A CA, a serving pair for 127.0.0.1/localhost and a client pair, as PEM."""

    ca: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _leaf(ca_key, ca_name, subject: str, usage, sans) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def make_pki() -> Pki:
    import ipaddress

    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "topology-inventory-ca")])
    now = dt.datetime.now(dt.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_cert, server_key = _leaf(ca_key, name, "localhost", ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client_cert, client_key = _leaf(ca_key, name, "topology-client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    return Pki(ca.public_bytes(serialization.Encoding.PEM), server_cert, server_key, client_cert, client_key)


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    drip: float = 0.0  # seconds between bytes of the body (a slow answer)
    hang: bool = False  # accept, read the request, never answer


class Inventory:
    """``with Inventory(pki, directory, token="t") as inv: inv.url``."""

    def __init__(
        self, pki: Pki, directory: Path, *, token: str = "", require_client_cert: bool = False
    ) -> None:
        self.pki = pki
        self.token = token
        self.answer = Answer()
        self.requests: list[dict[str, str]] = []
        self._release = threading.Event()
        cert, key, ca = directory / "server.crt", directory / "server.key", directory / "ca.crt"
        cert.write_bytes(pki.server_cert)
        key.write_bytes(pki.server_key)
        ca.write_bytes(pki.ca)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(ca)
        inventory = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                inventory.requests.append({k: v for k, v in self.headers.items()} | {"path": self.path})
                answer = inventory.answer
                if inventory.token and self.headers.get("Authorization") != f"Bearer {inventory.token}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if answer.hang:
                    inventory._release.wait(30)
                    return
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in answer.headers:
                    self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                try:
                    if answer.drip:
                        for index in range(len(answer.body)):
                            if inventory._release.is_set():
                                return
                            self.wfile.write(answer.body[index : index + 1])
                            self.wfile.flush()
                            time.sleep(answer.drip)
                    else:
                        self.wfile.write(answer.body)
                except OSError:
                    return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = serving_thread(self.httpd)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.httpd.server_address[1]}/snapshot"

    def __enter__(self) -> Inventory:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
