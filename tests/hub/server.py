"""The local hub's HTTP server: the Hugging Face Hub API subset the project calls.

Routes (``{repo}`` is ``owner/name`` or a bare name; ``{rev}`` one URL-encoded segment):

- ``GET /api/models/{repo}`` and ``GET /api/models/{repo}/revision/{rev}``: the model info, with
  ``sha`` the 40-hex commit the revision names (tags peeled);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=…&cursor=…``: files and directories, paged
  by ``page_size`` with a ``Link: <…>; rel="next"`` header, LFS files carrying ``lfs.oid`` (their
  SHA-256), masked with ``*`` for a gated repository the caller may not read;
- ``GET|HEAD /{repo}/resolve/{rev}/{path}`` (also under ``/api/models/``): a regular file's bytes
  (``Range`` honoured, 206), an LFS file as a 302 to a signed ``/cdn/{sha256}`` URL on
  ``cdn_host`` (by default another host name for this server, so a client that forwards its
  credential across hosts is caught), or at ``cdn_port``, a second listener of this server, where
  no second name reaches it (a Pod has only addresses);
- ``GET /api/whoami-v2``: the user of a known token, 401 otherwise.

Errors carry ``X-Error-Code`` as the hub does (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``, ``GatedRepo``). Control routes under ``/_hub/`` read the request log and set
faults; they are not logged. Faults (:class:`Fault`) answer a status, garbage, a truncated or
stalled body, a reset connection, or a slow body, for the requests they match, ``times`` times.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import ssl
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.hub.repos import HubRepos, RepoRecord, StoredFile, token_hash
from tests.net import serving_thread

KEYWORDS = ("revision", "tree", "resolve")
_SEND_CHUNK = 1 << 20


@dataclass(slots=True)
class Fault:
    """One injected misbehaviour.

    ``kind`` matches the route (``revision``, ``tree``, ``resolve``, ``cdn``, ``whoami`` or ``*``)
    and ``path`` a substring of the URL path. ``action``: ``status`` (answer ``status``),
    ``garbage`` (a 200 whose body is not what the route promises: not JSON, or wrong bytes of the
    right length), ``truncate`` (close after ``after`` body bytes), ``stall`` (send ``after`` bytes,
    then nothing for ``seconds``), ``reset`` (close without answering), ``slow`` (at most ``rate``
    bytes a second). ``times`` is how many requests it hits (None: all).
    """

    action: str
    kind: str = "*"
    path: str = ""
    status: int = 503
    after: int = 0
    seconds: float = 0.0
    rate: int = 0
    times: int | None = None

    def matches(self, kind: str, path: str) -> bool:
        return (self.kind in ("*", kind)) and self.path in path and self.times != 0


@dataclass(slots=True)
class HubState:
    repos: HubRepos
    page_size: int = 1000
    cdn_host: str | None = "localhost"
    cdn_port: int | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    faults: list[Fault] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, kind: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(kind, path):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            entry["seq"] = len(self.log)
            self.log.append(entry)

    def sign(self, sha256: str, expires: int) -> str:
        return hmac.new(self.secret, f"{sha256}:{expires}".encode(), hashlib.sha256).hexdigest()


class _Abort(Exception):
    """The handler closed the connection on purpose (a fault)."""


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "local-hub/1"
    server: _Server

    # --- plumbing ---------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # the request log replaces stderr lines
        return

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    @property
    def state(self) -> HubState:
        return self.server.state

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        self._entry: dict[str, Any] = {
            "method": self.command,
            "path": url.path,  # never the query: it may carry a signature
            "host": self.headers.get("Host", ""),
            "range": self.headers.get("Range"),
            "auth": self._auth_kind(),
            "kind": "other",
            "status": None,
            "sent": 0,
        }
        if url.path.startswith("/_hub/"):
            self._control(url.path)
            return
        self.state.record(self._entry)  # at once: a stalled request is in the log while it stalls
        try:
            self._route(url.path, parse_qs(url.query))
        except (_Abort, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _token_sha(self) -> str | None:
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:].strip():
            return token_hash(header[7:].strip())
        return None

    def _auth_kind(self) -> str:
        sha = self._token_sha()
        if sha is None:
            return "none"
        return "known" if self.state.repos.user_for(sha) else "unknown"

    def _send(
        self,
        status: int,
        body: bytes = b"",
        *,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self._entry["status"] = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
            self._entry["sent"] = len(body)

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        fault = self._fault
        if fault is not None and fault.action == "garbage":
            self._send(200, b"<html>upstream says hello</html>", content_type="text/html")
            return
        self._send(status, json.dumps(data).encode(), headers=headers)

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, json.dumps({"error": message}).encode(), headers=headers)

    # --- routing ----------------------------------------------------------------------------------

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        self._fault: Fault | None = None
        if path == "/api/whoami-v2":
            return self._with_fault("whoami", path, self._whoami)
        if path.startswith("/cdn/"):
            return self._with_fault("cdn", path, lambda: self._cdn(path[5:], query))
        api = path.startswith("/api/models/")
        segments = (path[len("/api/models/") :] if api else path[1:]).split("/")
        parsed = _split_repo(segments, allow_bare_info=api)
        if parsed is None:
            return self._error(404, None, "Not Found")
        repo_id, keyword, rest = parsed
        self._entry["repo"] = repo_id
        if keyword == "resolve":
            return self._with_fault("resolve", path, lambda: self._resolve(repo_id, rest))
        if not api:
            return self._error(404, None, "Not Found")
        if keyword == "tree":
            return self._with_fault("tree", path, lambda: self._tree(repo_id, rest, query))
        return self._with_fault("revision", path, lambda: self._revision(repo_id, rest))

    def _with_fault(self, kind: str, path: str, handler: Any) -> None:
        self._entry["kind"] = kind
        fault = self.state.take_fault(kind, path)
        self._fault = fault
        if fault is not None:
            if fault.action == "status":
                return self._error(fault.status, None, "injected failure")
            if fault.action == "reset":
                self._entry["status"] = "reset"
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                raise _Abort
        handler()

    def _repo_for(self, repo_id: str, *, listing: bool = False) -> RepoRecord | None:
        """The repository when the caller may see it; otherwise the hub's refusal is sent."""
        record = self.state.repos.load(repo_id)
        token = self._token_sha()
        if record is None or (record.private and not record.readable_by(token)):
            status = 404 if token and self.state.repos.user_for(token) else 401
            self._error(status, "RepoNotFound", "Repository not found")
            return None
        return record

    def _commit(self, record: RepoRecord, revision: str) -> str | None:
        commit = record.commit_for(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _revision(self, repo_id: str, rest: list[str]) -> None:
        record = self._repo_for(repo_id)
        if record is None:
            return
        revision = unquote(rest[0]) if rest and rest[0] else "main"
        commit = self._commit(record, revision)
        if commit is None:
            return
        files = record.files(commit)
        self._json(
            200,
            {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0] if "/" in repo_id else None,
                "sha": commit,
                "private": record.private,
                "gated": "manual" if record.gated else False,
                "disabled": False,
                "tags": [],
                "siblings": [{"rfilename": f.path} for f in files],
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2026-01-01T00:00:00.000Z",
            },
        )

    def _tree(self, repo_id: str, rest: list[str], query: dict[str, list[str]]) -> None:
        record = self._repo_for(repo_id)
        if record is None or not rest:
            if record is not None:
                self._error(404, None, "Not Found")
            return
        revision = unquote(rest[0])
        commit = self._commit(record, revision)
        if commit is None:
            return
        prefix = "/".join(unquote(s) for s in rest[1:]).strip("/")
        recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
        masked = record.gated and not record.readable_by(self._token_sha())
        entries = _tree_entries(record.files(commit), prefix, recursive, masked)
        if prefix and not entries and not any(f.path == prefix for f in record.files(commit)):
            return self._error(404, "EntryNotFound", f"{prefix} does not exist on {revision}")
        start = int((query.get("cursor") or ["0"])[0] or 0)
        page = entries[start : start + self.state.page_size]
        headers: dict[str, str] = {}
        if start + self.state.page_size < len(entries):
            base = f"http://{self.headers.get('Host', '')}{urlsplit(self.path).path}"
            link = f"{base}?recursive={recursive}&expand=False&cursor={start + self.state.page_size}"
            headers["Link"] = f'<{link}>; rel="next"'
        self._json(200, page, headers)

    def _resolve(self, repo_id: str, rest: list[str]) -> None:
        record = self._repo_for(repo_id)
        if record is None:
            return
        if len(rest) < 2:
            return self._error(404, None, "Not Found")
        revision = unquote(rest[0])
        commit = self._commit(record, revision)
        if commit is None:
            return
        path = "/".join(unquote(s) for s in rest[1:])
        found = next((f for f in record.files(commit) if f.path == path), None)
        if found is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist on {revision}")
        if record.gated and not record.readable_by(self._token_sha()):
            status = 403 if self._token_sha() else 401
            return self._error(status, "GatedRepo", "Access to this model is restricted")
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if found.lfs:
            expires = int(time.time()) + 3600
            signature = self.state.sign(found.sha256, expires)
            host = self.state.cdn_host or self.headers.get("Host", "").rsplit(":", 1)[0]
            scheme = "https" if self.server.tls else "http"
            location = (
                f"{scheme}://{host}:{self.state.cdn_port or self.server.server_port}/cdn/{found.sha256}"
                f"?Expires={expires}&X-Amz-Signature={signature}"
            )
            headers |= {
                "Location": location,
                "ETag": f'"{found.sha256}"',
                "X-Linked-Etag": f'"{found.sha256}"',
                "X-Linked-Size": str(found.size),
            }
            return self._send(302, b"", headers=headers, content_type="text/plain")
        headers["ETag"] = f'"{found.oid}"'
        self._file(found.sha256, found.size, headers)

    def _cdn(self, sha256: str, query: dict[str, list[str]]) -> None:
        expires = (query.get("Expires") or ["0"])[0]
        signature = (query.get("X-Amz-Signature") or [""])[0]
        ok = expires.isdigit() and int(expires) >= time.time()
        if not ok or not hmac.compare_digest(signature, self.state.sign(sha256, int(expires or 0))):
            return self._send(
                403, b"<Error><Code>AccessDenied</Code></Error>", content_type="application/xml"
            )
        path = self.state.repos.object_path(sha256)
        if not path.is_file():
            return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>", content_type="application/xml")
        self._file(sha256, path.stat().st_size, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"})

    def _whoami(self) -> None:
        sha = self._token_sha()
        name = self.state.repos.user_for(sha) if sha else None
        if name is None:
            return self._error(401, None, "Invalid credentials in Authorization header")
        self._json(200, {"type": "user", "name": name, "auth": {"type": "access_token"}})

    # --- bodies -----------------------------------------------------------------------------------

    def _file(self, sha256: str, size: int, headers: dict[str, str]) -> None:
        span = _parse_range(self.headers.get("Range"), size)
        if span == "invalid":
            return self._error(416, None, "Range Not Satisfiable")
        status = 200
        start, end = 0, size
        if span is not None:
            start, end = span
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        self._entry["status"] = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(self.state.repos.object_path(sha256), "rb") as f:
            self._body(f, start, end)

    def _body(self, f: Any, start: int, end: int) -> None:
        fault = self._fault
        self.wfile.flush()
        if fault is None:
            sent = self.connection.sendfile(f, start, end - start)
            self._entry["sent"] = sent
            return
        limit = end
        if fault.action in ("truncate", "stall"):
            limit = min(end, start + fault.after)
        position = start
        begun = time.monotonic()
        while position < limit:
            n = min(_SEND_CHUNK, limit - position, max(fault.rate // 10, 1) if fault.rate else _SEND_CHUNK)
            data = os.pread(f.fileno(), n, position)
            if fault.action == "garbage":
                data = bytes(b ^ 0x5A for b in data)
            self.connection.sendall(data)
            position += len(data)
            self._entry["sent"] = position - start
            if fault.action == "slow" and fault.rate:
                ahead = (position - start) / fault.rate - (time.monotonic() - begun)
                if ahead > 0:
                    time.sleep(ahead)
        if position < end:
            if fault.action == "stall":
                time.sleep(fault.seconds)
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            raise _Abort

    # --- control ------------------------------------------------------------------------------------

    def _control(self, path: str) -> None:
        if path == "/_hub/log" and self.command == "GET":
            with self.state.lock:
                body = json.dumps(self.state.log).encode()
            return self._send(200, body)
        if path == "/_hub/log" and self.command == "DELETE":
            with self.state.lock:
                self.state.log.clear()
            return self._send(200, b"{}")
        if path == "/_hub/faults" and self.command == "PUT":
            length = int(self.headers.get("Content-Length") or 0)
            rules = json.loads(self.rfile.read(length) or b"[]")
            with self.state.lock:
                self.state.faults = [Fault(**rule) for rule in rules]
            return self._send(200, b"{}")
        if path == "/_hub/faults" and self.command == "GET":
            with self.state.lock:
                body = json.dumps([asdict(f) for f in self.state.faults]).encode()
            return self._send(200, body)
        if path == "/_hub/health":
            return self._send(200, b'{"ok": true}')
        self._send(404, b"{}")


def _split_repo(segments: list[str], *, allow_bare_info: bool) -> tuple[str, str, list[str]] | None:
    """``(repo, keyword, rest)`` from the path segments after the prefix; ``info`` for model info."""
    if len(segments) >= 2 and segments[1] in KEYWORDS and segments[0]:
        return segments[0], segments[1], segments[2:]
    if len(segments) >= 3 and segments[2] in KEYWORDS and segments[0] and segments[1]:
        return f"{segments[0]}/{segments[1]}", segments[2], segments[3:]
    if allow_bare_info and 1 <= len(segments) <= 2 and all(segments):
        return "/".join(segments), "revision", []
    return None


def _tree_entries(
    files: list[StoredFile], prefix: str, recursive: bool, masked: bool
) -> list[dict[str, Any]]:
    base = prefix + "/" if prefix else ""
    directories: set[str] = set()
    out: list[dict[str, Any]] = []
    for f in files:
        if not f.path.startswith(base):
            continue
        tail = f.path[len(base) :]
        parts = tail.split("/")
        for depth in range(1, len(parts)):
            if depth > 1 and not recursive:
                break
            directories.add(base + "/".join(parts[:depth]))
        if len(parts) > 1 and not recursive:
            continue
        entry: dict[str, Any] = {"type": "file", "oid": f.oid, "size": f.size, "path": f.path}
        if f.lfs:
            oid = "*" * 64 if masked else f.sha256
            entry["lfs"] = {"oid": oid, "size": f.size, "pointerSize": 134}
        out.append(entry)
    for d in directories:
        tree_id = hashlib.sha1(d.encode()).hexdigest()
        out.append({"type": "directory", "oid": tree_id, "size": 0, "path": d})
    return sorted(out, key=lambda e: e["path"].encode())


def _parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """``(start, end)`` (end exclusive) for one ``bytes=`` range, None for none, ``invalid``."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return "invalid"
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            start, end = max(size - n, 0), size
        else:
            start = int(first)
            end = min(int(last) + 1, size) if last else size
    except ValueError:
        return "invalid"
    if start >= size or start >= end or start < 0:
        return "invalid"
    return start, end


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], state: HubState, tls: ssl.SSLContext | None) -> None:
        self.state = state
        self.tls = tls
        super().__init__(address, HubHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True)
        return sock, address


class HubServer:
    """The local hub on ``host:port`` (0: a free port), in a background thread.

    ``tls`` = (certfile, keyfile) serves HTTPS. The endpoint to configure clients with is
    :attr:`endpoint`; :attr:`repos` writes repositories it serves at once.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        page_size: int = 1000,
        cdn_host: str | None = "localhost",
        cdn_port: int | None = None,
        tls: tuple[str, str] | None = None,
    ) -> None:
        self.repos = HubRepos(root)
        self.state = HubState(self.repos, page_size=page_size, cdn_host=cdn_host, cdn_port=cdn_port)
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
        self._server = _Server((host, port), self.state, context)
        # Another origin for the LFS redirects (huggingface_hub follows a redirect to the same origin).
        self._cdn = _Server((host, cdn_port), self.state, context) if cdn_port else None
        self._thread: threading.Thread | None = None
        self._cdn_thread: threading.Thread | None = None
        self.host = host

    @property
    def port(self) -> int:
        return self._server.server_port

    @property
    def endpoint(self) -> str:
        scheme = "https" if self._server.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self) -> HubServer:
        self._thread = serving_thread(self._server, name="local-hub")
        self._thread.start()
        if self._cdn is not None:
            self._cdn_thread = serving_thread(self._cdn, name="local-hub-cdn")
            self._cdn_thread.start()
        return self

    def serve_forever(self) -> None:
        if self._cdn is not None:
            self._cdn_thread = serving_thread(self._cdn, name="local-hub-cdn")
            self._cdn_thread.start()
        self._server.serve_forever()

    def stop(self) -> None:
        for server in (self._server, self._cdn):
            if server is not None:
                server.shutdown()
                server.server_close()
        for thread in (self._thread, self._cdn_thread):
            if thread is not None:
                thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what tests read and set ---------------------------------------------------------------------

    def log(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self.state.lock:
            return [dict(e) for e in self.state.log if kind is None or e["kind"] == kind]

    def clear_log(self) -> None:
        with self.state.lock:
            self.state.log.clear()

    def set_faults(self, *faults: Fault) -> None:
        with self.state.lock:
            self.state.faults = list(faults)

    def url(self, repo_id: str, path: str, revision: str = "main") -> str:
        return f"{self.endpoint}/{repo_id}/resolve/{quote(revision, safe='')}/{quote(path)}"
