"""The webhook arm's one read (topology spec B.3): an authenticated HTTPS ``GET`` with bounds.

- HTTPS only, the system trust store or the source's CA bundle, hostname verified;
- a bearer token or a client certificate, never both, never in the URL;
- no redirects (a 3xx is a failed read: credentials are never forwarded elsewhere) and no proxy
  (``http.client`` reads no proxy environment);
- at most :data:`api.topology.MAX_SNAPSHOT_BYTES` read (a longer body is refused, not truncated);
- ``timeout`` bounds the whole exchange: the connect and handshake by the socket timeout, and the
  whole answer by a watchdog that cuts the connection at the deadline (a drip of bytes, each in
  time, cannot stretch it).

A failure raises :class:`FetchError` with what went wrong; the caller keeps its last valid set.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from api import topology as topo


class FetchError(RuntimeError):
    """The snapshot could not be read (the message says why)."""


@dataclass(frozen=True, slots=True)
class Credentials:
    token: str = ""
    certificate: bytes = b""  # PEM client certificate (mTLS)
    key: bytes = b""  # its PEM private key
    ca_bundle: bytes = b""  # PEM CA bundle; empty: the system trust store


def _context(credentials: Credentials) -> ssl.SSLContext:
    try:
        if credentials.ca_bundle:
            context = ssl.create_default_context(cadata=credentials.ca_bundle.decode("ascii", "replace"))
        else:
            context = ssl.create_default_context()
    except (ssl.SSLError, ValueError) as error:
        raise FetchError(f"the CA bundle does not load: {error}") from None
    if credentials.certificate:
        # ssl loads a client certificate from files only: a private directory that lives for the call.
        with tempfile.TemporaryDirectory(prefix="gpustack-topology-") as directory:
            cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
            for path, data in ((cert, credentials.certificate), (key, credentials.key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
            try:
                context.load_cert_chain(cert, key)
            except (ssl.SSLError, ValueError) as error:
                raise FetchError(f"the client certificate does not load: {error}") from None
    return context


def fetch(
    url: str, credentials: Credentials, *, timeout: float, max_bytes: int = topo.MAX_SNAPSHOT_BYTES
) -> bytes:
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise FetchError(f"{url!r} is not an absolute https URL")
    deadline = time.monotonic() + timeout

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FetchError(f"no complete answer within {timeout:g}s")
        return left

    context = _context(credentials)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    headers = {
        "Accept": "application/json, application/yaml;q=0.9, */*;q=0.1",
        "User-Agent": "gpustack-worker",
    }
    if credentials.token:
        headers["Authorization"] = f"Bearer {credentials.token}"
    connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=remaining(), context=context)
    expired = threading.Event()
    watchdog: threading.Timer | None = None
    try:
        connection.connect()  # connect and handshake, bounded by the socket timeout
        raw = connection.sock

        def cut() -> None:  # the whole answer is late: unblock whatever read is waiting
            expired.set()
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(remaining(), cut)
        watchdog.daemon = True
        watchdog.start()
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        if 300 <= response.status < 400:
            raise FetchError(
                f"answered {response.status} (a redirect to {response.getheader('Location')!r}); "
                "redirects are not followed, point spec.webhook.url at the snapshot itself"
            )
        if response.status != 200:
            raise FetchError(f"answered {response.status} {response.reason}")
        length = response.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise FetchError(f"announced {int(length)} bytes; at most {max_bytes} are read")
        body = bytearray()
        while True:
            chunk = response.read1(min(65536, max_bytes + 1 - len(body)))
            if expired.is_set():
                raise FetchError(f"no complete answer within {timeout:g}s")
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise FetchError(f"the answer exceeds {max_bytes} bytes; at most that much is read")
        return bytes(body)
    except FetchError:
        raise
    except TimeoutError:
        raise FetchError(f"no complete answer within {timeout:g}s") from None
    except ssl.SSLError as error:
        if expired.is_set():
            raise FetchError(f"no complete answer within {timeout:g}s") from None
        raise FetchError(f"TLS failed: {error}") from None
    except (OSError, http.client.HTTPException) as error:
        if expired.is_set():
            raise FetchError(f"no complete answer within {timeout:g}s") from None
        raise FetchError(f"{type(error).__name__}: {error}") from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        connection.close()
