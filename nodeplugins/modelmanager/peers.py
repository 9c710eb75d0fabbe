"""Node-to-node sync (model-delivery spec §4.10): a plugin serves its published trees to the other
nodes' plugins, and a cold node pulls a digest from a peer that holds it before the hub.

Serving (``--peer-port``, 0 is off and is the master switch):

- ``GET /peer/v1/trees/{hex}``: the stored manifest of a published tree (the marker must name the
  digest; a tree without a stored manifest is no listing source);
- ``GET /peer/v1/trees/{hex}/files/{path}``: one file of it by HTTP byte range (a path the manifest
  does not list is 404), sent with ``sendfile``; at most ``max_streams`` file answers run at once,
  past that a 503 sends the puller to its next source;
- every request carries the pulling plugin's projected ServiceAccount token (audience
  ``gpustack-model-peer``) as a bearer token; a TokenReview admits only the plugins' ServiceAccount.
  Positive answers are cached until the earlier of five minutes and the token's own expiry;
  refusals are never cached.

Pulling (:class:`Peers`, used by the materializer while ``spec.peerSync`` allows it): the
candidates are the other nodes whose NodeModelStore lists the digest ``Ready`` and names a
``peerAddress``; a candidate's manifest is bound to the requested digest before any byte is pulled
(a forged or truncated listing is refused and the next candidate takes over). Nothing here names a
tenant: a request names a digest and a manifest path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import random
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from api import delivery as d
from api.manifest import Manifest, ManifestError
from kube.client import ApiError, Client
from kube.informer import Informer
from nodeplugins.modelmanager import metrics
from nodeplugins.modelmanager.fetch import FetchError, Source, open_range
from nodeplugins.modelmanager.layout import Layout

log = logging.getLogger("modelmanager.peers")

POSITIVE_TTL = 300.0
MANIFEST_LIMIT = 64 << 20
_HEX = re.compile(r"^[0-9a-f]{64}$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


# --- who may ask ------------------------------------------------------------------------------------


def _jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, unverified: read only after a TokenReview authenticated it."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp")
        return float(exp) if isinstance(exp, int | float) else None
    except (IndexError, ValueError, TypeError, AttributeError):
        return None


class PeerAuth:
    """A TokenReview per unknown token; positives cached, refusals never."""

    def __init__(
        self,
        review: Callable[[str], tuple[bool, str, list[str]]],
        allowed_user: str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.review = review
        self.allowed_user = allowed_user
        self.clock = clock
        self._cache: dict[str, float] = {}
        self._lock = threading.Lock()

    @classmethod
    def over(cls, client: Client, allowed_user: str) -> PeerAuth:
        def review(token: str) -> tuple[bool, str, list[str]]:
            answer = client.create(
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token, "audiences": [d.PEER_AUDIENCE]},
                }
            )
            status = (answer or {}).get("status") or {}
            user = (status.get("user") or {}).get("username") or ""
            return bool(status.get("authenticated")), str(user), list(status.get("audiences") or [])

        return cls(review, allowed_user)

    def admits(self, header: str | None) -> tuple[bool, str]:
        """Whether the ``Authorization`` header carries a token of the plugins' ServiceAccount; the
        refusal, tenant-free, when not."""
        if not header or not header.startswith("Bearer ") or not header[7:].strip():
            return False, "a peer request needs the pulling plugin's ServiceAccount token"
        token = header[7:].strip()
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            until = self._cache.get(key)
            if until is not None and until > now:
                return True, ""
            self._cache.pop(key, None)
        try:
            authenticated, user, audiences = self.review(token)
        except ApiError as error:
            return False, f"the token could not be reviewed ({error.status})"
        if not authenticated or d.PEER_AUDIENCE not in audiences:
            return False, f"the token is not valid for the audience {d.PEER_AUDIENCE}"
        if user != self.allowed_user:
            return False, "only the model-manager plugins' ServiceAccount may pull from a peer"
        expiry = _jwt_expiry(token)
        until = now + POSITIVE_TTL if expiry is None else min(now + POSITIVE_TTL, expiry)
        with self._lock:
            if len(self._cache) > 1024:
                self._cache = {k: v for k, v in self._cache.items() if v > now}
            self._cache[key] = until
        return True, ""


# --- serving ----------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PeerServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, status: int, message: str) -> None:
        self._answer(status, json.dumps({"error": message}).encode())

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if not path.startswith(d.PEER_TREES_PATH):
            return self._refuse(404, "not found")
        ok, why = self.server.auth.admits(self.headers.get("Authorization"))
        if not ok:
            return self._refuse(401 if "needs" in why else 403, why)
        rest = path[len(d.PEER_TREES_PATH) :]
        hex_, _, tail = rest.partition("/")
        if not _HEX.fullmatch(hex_):
            return self._refuse(404, "not a digest")
        digest = "sha256:" + hex_
        layout = self.server.layout
        if not layout.published(digest):
            return self._refuse(404, "this node holds no published tree of that digest")
        manifest_path = layout.tree(digest) / "manifest"
        if not tail:
            try:
                text = manifest_path.read_bytes()
            except OSError:
                return self._refuse(404, "this tree has no stored manifest")
            return self._answer(200, text, {"Content-Type": "text/plain; charset=utf-8"})
        if not tail.startswith("files/"):
            return self._refuse(404, "not found")
        self._file(digest, unquote(tail[len("files/") :]))

    def _file(self, digest: str, rel: str) -> None:
        manifest = self.server.manifest(digest)
        entry = next((f for f in manifest.files if f.path == rel), None) if manifest else None
        if entry is None:
            return self._refuse(404, "the tree's manifest lists no such file")
        if not self.server.streams.acquire(blocking=False):
            return self._refuse(503, "this peer serves its maximum of streams; try another source")
        try:
            self._send_file(self.server.layout.tree_model(digest) / entry.path, entry.size)
        finally:
            self.server.streams.release()

    def _send_file(self, path: Path, size: int) -> None:
        start, end, status = 0, size, 200
        wanted = self.headers.get("Range")
        if wanted:
            match = _RANGE.match(wanted.strip())
            if not match or int(match[1]) >= size:
                return self._refuse(416, "range not satisfiable")
            start = int(match[1])
            end = min(int(match[2]) + 1, size) if match[2] else size
            if end <= start:
                return self._refuse(416, "range not satisfiable")
            status = 206
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return self._refuse(404, "the file left this node")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            self.wfile.flush()
            position = start
            while position < end:
                sent = os.sendfile(self.connection.fileno(), fd, position, min(end - position, 1 << 30))
                if sent == 0:
                    break
                position += sent
            metrics.PEER_SERVED_BYTES.inc(position - start)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            os.close(fd)


class PeerServer(ThreadingHTTPServer):
    """The peer endpoints on their own port (plain HTTP, or TLS when a context is given)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        layout: Layout,
        auth: PeerAuth,
        *,
        max_streams: int = 8,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.layout = layout
        self.auth = auth
        self.streams = threading.BoundedSemaphore(max(1, max_streams))
        self._manifests: dict[str, Manifest] = {}
        super().__init__(address, _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)

    def manifest(self, digest: str) -> Manifest | None:
        found = self._manifests.get(digest)
        if found is None:
            found = self.layout.tree_manifest(digest)
            if found is not None:
                if len(self._manifests) > 64:
                    self._manifests.clear()
                self._manifests[digest] = found
        return found

    def start(self) -> threading.Thread:
        # A 0.1 s poll: stopping the port (a Pod terminating, a test's teardown) waits at most that.
        thread = threading.Thread(target=self.serve_forever, args=(0.1,), name="peer-port", daemon=True)
        thread.start()
        return thread


# --- pulling ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerConnection:
    """Where a peer is reached: no proxy (peers are inside the cluster), its own TLS trust."""

    address: str
    tls: bool = True
    ca_file: str = ""

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address}"

    @cached_property
    def ssl_context(self) -> ssl.SSLContext:
        if self.ca_file:
            return ssl.create_default_context(cafile=self.ca_file)
        # Without a CA the peer's certificate is not verified: the bytes are bound to the digest
        # whatever the channel, and the token is audience-bound to peers.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context

    def proxy_for(self, url: str) -> str | None:
        return None


@dataclass(frozen=True)
class Peer:
    node: str
    connection: PeerConnection


class Peers:
    """Which peers hold a digest, and the token this plugin presents to them."""

    def __init__(
        self,
        stores: Informer,
        own_node: str,
        token_file: Path | None,
        *,
        tls: bool = True,
        ca_file: str = "",
        streams_per_source: int = 4,
        timeout: float = 30.0,
        shuffle: Callable[[list[Peer]], None] = random.shuffle,
    ) -> None:
        self.stores = stores
        self.own_node = own_node
        self.token_file = token_file
        self.tls = tls
        self.ca_file = ca_file
        self.streams_per_source = max(1, streams_per_source)
        self.timeout = timeout
        self.shuffle = shuffle

    def token(self) -> str | None:
        """The projected token, read at each use (kubelet rotates it); None when unreadable."""
        if self.token_file is None:
            return None
        try:
            value = self.token_file.read_text().strip()
        except OSError:
            return None
        return value or None

    def candidates(self, digest: str) -> list[Peer]:
        """The other nodes whose store lists ``digest`` Ready and serves peers, in random order."""
        found = []
        for store in self.stores.list():
            node = (store.get("metadata") or {}).get("name") or ""
            status = store.get("status") or {}
            address = status.get("peerAddress")
            if node == self.own_node or not isinstance(address, str) or not address:
                continue
            ready = any(
                m.get("digest") == digest and m.get("state") == d.STATE_READY
                for m in status.get("models") or []
            )
            if ready:
                found.append(Peer(node, PeerConnection(address, self.tls, self.ca_file)))
        self.shuffle(found)
        return found

    def source(self, peer: Peer, digest: str, path: str, token: str | None) -> Source:
        hex_ = digest[len("sha256:") :]
        url = f"{peer.connection.base}{d.PEER_TREES_PATH}{hex_}/files/{quote(path)}"
        return Source(peer.connection, url, token)

    def manifest(self, peer: Peer, digest: str, token: str | None) -> Manifest:
        """The peer's stored manifest, bound to ``digest``; raises :class:`FetchError`."""
        hex_ = digest[len("sha256:") :]
        url = f"{peer.connection.base}{d.PEER_TREES_PATH}{hex_}"
        source = Source(peer.connection, url, token)
        body = open_range(source, 0, MANIFEST_LIMIT, MANIFEST_LIMIT, timeout=self.timeout, whole=True)
        with body:
            chunks = []
            total = 0
            buf = memoryview(bytearray(1 << 16))
            while (n := body.readinto(buf)) > 0:
                chunks.append(bytes(buf[:n]))
                total += n
                if total > MANIFEST_LIMIT:
                    raise FetchError(d.INTEGRITY_MISMATCH, "a peer's manifest is larger than any manifest")
        try:
            manifest = Manifest.parse(b"".join(chunks))
        except ManifestError:
            raise FetchError(d.INTEGRITY_MISMATCH, "a peer's manifest is not a manifest") from None
        if manifest.digest != digest:
            raise FetchError(d.INTEGRITY_MISMATCH, "a peer's manifest does not match the digest")
        return manifest
